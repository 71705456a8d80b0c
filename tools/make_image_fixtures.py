#!/usr/bin/env python3
"""Small PNG files of every colour type and the RGB that Pillow reads from each (what transformers'
image processors see after convert("RGB")), saved as binary PPM next to them, for
tests/nn/models/test_vit.cpp. Run from the repository root: python3 tools/make_image_fixtures.py"""
import os

import numpy as np
from PIL import Image

OUT = os.path.join("tests", "fixtures", "images")


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(7)
    rgb = rng.integers(0, 256, (5, 6, 3), dtype=np.uint8)
    alpha = rng.integers(0, 256, (5, 6), dtype=np.uint8)
    gray = rng.integers(0, 256, (5, 6), dtype=np.uint8)
    images = {
        "rgb8": Image.fromarray(rgb, "RGB"),
        "rgba8": Image.fromarray(np.dstack([rgb, alpha]), "RGBA"),
        "gray8": Image.fromarray(gray, "L"),
        "gray_alpha8": Image.fromarray(np.dstack([gray, alpha]), "LA"),
        "palette": Image.fromarray(rgb, "RGB").quantize(colors=7),
    }
    for name, img in images.items():
        path = os.path.join(OUT, name + ".png")
        img.save(path)
        Image.open(path).convert("RGB").save(os.path.join(OUT, name + ".ppm"))


if __name__ == "__main__":
    main()
