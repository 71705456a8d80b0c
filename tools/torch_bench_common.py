"""Shared set-up for the PyTorch comparison scripts: reading hedgehog's --json results, importing
torch and choosing the device/threads, each failing with a clear 'error: ...' and exit 1."""
import json
import sys


def die(msg):
    sys.stderr.write(f"error: {msg}\n")
    sys.exit(1)


def load_compare(path, key):
    """hedgehog results from a --json file, indexed by key(record); {} when path is empty."""
    if not path:
        return {}
    try:
        with open(path) as f:
            return {key(r): r for r in json.load(f).get("results", [])}
    except (OSError, ValueError, KeyError) as e:
        die(f"cannot read --compare file '{path}': {e}")


def write_json(path, out):
    """Writes the results object to --json's file, or fails with a clear error."""
    try:
        with open(path, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")
    except OSError as e:
        die(f"cannot write --json file '{path}': {e}")


def setup_torch(device_name, threads):
    """Returns (torch, device) after checking the device exists and setting the thread count."""
    try:
        import torch
    except ImportError as e:
        die(f"PyTorch is not importable: {e}")
    try:
        device = torch.device(device_name)
    except RuntimeError as e:
        die(f"--device: {e}")
    if device.type not in ("cpu", "cuda") or (device.type == "cuda" and not torch.cuda.is_available()):
        die(f"--device {device_name}: not available (cpu, or cuda with a CUDA torch and GPU)")
    if threads:
        torch.set_num_threads(threads)
    return torch, device
