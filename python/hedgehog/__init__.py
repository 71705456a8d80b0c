"""hedgehog: the engine's tensors, autograd, attention ops and HF models from Python.

    import numpy as np, hedgehog as hh
    q = hh.tensor(np.random.randn(1, 2, 16, 8).astype(np.float32), requires_grad=True)
    phi = hh.feature_map("hedgehog", heads=2, head_dim=8)
    y = hh.linear_attention(phi(q), phi(q, is_query=False), q)
    y.sum().backward(); q.grad.numpy()
    model = hh.load("path/to/hf-folder"); model.generate("The hedgehog", max_new_tokens=16)
    hh.convert("gpt2-folder", data="wikitext", preset="quick", out="out/gpt2")  # as convert_gpt2 does

Engine errors are raised as hedgehog.Error (a RuntimeError) with the engine's message.
"""
import contextlib

from ._hedgehog import *  # noqa: F401,F403
from ._hedgehog import Error, Model, Tensor, Tokenizer, _grad_enabled, _set_grad_enabled, load, tensor  # noqa: F401
from .drivers import convert, evaluate  # noqa: F401

__all__ = [name for name in dir() if not name.startswith("_")]


@contextlib.contextmanager
def no_grad():
    """Autograd records nothing inside the block (as torch.no_grad)."""
    before = _grad_enabled()
    _set_grad_enabled(False)
    try:
        yield
    finally:
        _set_grad_enabled(before)
