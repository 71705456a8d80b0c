#!/usr/bin/env python3
"""Builds the convert_vit fixtures in tests/fixtures/vit/ (tooling only; the tests read the files).

  cifar-tiny/      CIFAR-10 binary layout: data_batch_1.bin (32 records), test_batch.bin (12 records),
                   batches.meta.txt. Each image is its class's colour plus noise, so classes differ.
  vit-cifar-tiny/  a ViTForImageClassification for it: 32x32 images, 8x8 patches, 10 labels (random
                   weights, as tools/make_hf_fixtures.py draws them), preprocessor_config.json.
  folders-tiny/    train/ and test/ folders of 5 class sub-folders (LABEL_0..LABEL_4, vit-tiny's labels),
                   4 + 2 binary PPM images of 8x8 each (the model's preprocessing resizes them to 40x40).

Usage: python3 tools/make_vit_fixtures.py [out_dir]     (pip install torch transformers numpy)
"""
import os
import shutil
import sys

import numpy as np
import torch
import transformers as tf

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "vit")
CIFAR_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def fresh(folder):
    path = os.path.join(OUT, folder)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def class_image(rng, label, classes, size):
    """(size, size, 3) uint8: a colour picked by the label, plus noise."""
    hue = np.array([(label * 97) % 256, (label * 57 + 80) % 256, (label * 151 + 30) % 256], dtype=np.float64)
    img = hue[None, None, :] + rng.normal(0, 30, (size, size, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def cifar():
    path = fresh("cifar-tiny")
    rng = np.random.default_rng(10)
    for name, count in (("data_batch_1.bin", 32), ("test_batch.bin", 12)):
        out = bytearray()
        for i in range(count):
            label = i % 10
            img = class_image(rng, label, 10, 32)
            out.append(label)
            out += img.transpose(2, 0, 1).tobytes()  # planes R, G, B of 32 rows of 32
        with open(os.path.join(path, name), "wb") as f:
            f.write(bytes(out))
    with open(os.path.join(path, "batches.meta.txt"), "w") as f:
        f.write("\n".join(CIFAR_NAMES) + "\n\n")


def vit_cifar():
    torch.manual_seed(10)
    cfg = tf.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=37, hidden_act="gelu", layer_norm_eps=1e-12,
                       initializer_range=0.1, num_labels=10, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0, attn_implementation="eager")
    model = tf.ViTForImageClassification(cfg).eval()
    path = fresh("vit-cifar-tiny")
    model.save_pretrained(path, safe_serialization=True)
    proc = tf.ViTImageProcessor(size={"height": 32, "width": 32}, do_resize=True, image_mean=[0.5] * 3,
                                image_std=[0.5] * 3)
    proc.save_pretrained(path)


def folders():
    path = fresh("folders-tiny")
    rng = np.random.default_rng(11)
    for split, count in (("train", 4), ("test", 2)):
        for label in range(5):
            d = os.path.join(path, split, "LABEL_%d" % label)
            os.makedirs(d)
            for i in range(count):
                img = class_image(rng, label, 5, 8)
                with open(os.path.join(d, "img%d.ppm" % i), "wb") as f:
                    f.write(b"P6\n8 8\n255\n" + img.tobytes())


def main():
    cifar()
    vit_cifar()
    folders()


if __name__ == "__main__":
    main()
