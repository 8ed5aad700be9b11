"""What checking an image whole costs at ``add``, per MB: the part check (base64 decoded, the
header read, the image checked whole as a provider checks it) against the base64 decode alone.

    python benchmarks/image_checks.py [--mb 1 5]
    python benchmarks/image_checks.py --smoke      # seconds: 0.25 MB

No server: the check runs on the client, before anything is sent. Each image is made by Pillow
from noise (it does not compress), saved as PNG, JPEG, GIF and WebP; each row times, per call,
``parts.check`` of one ``image_url`` data-URL part, the base64 decode alone, and
``images.broken`` alone, and gives the check's cost per MB of image.
"""

from __future__ import annotations

import argparse
import base64
import io
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from PIL import Image

from contextstore.core import images, parts

from _common import table, timed


def made(mb: float, fmt: str) -> bytes:
    """An image in ``fmt`` of about ``mb`` MB (PNG; the others at the same pixels are smaller)."""
    side = int((mb * 1e6 / 3) ** 0.5)
    pixels = random.Random(7).randbytes(side * side * 3)
    out = io.BytesIO()
    Image.frombytes("RGB", (side, side), pixels).save(out, fmt)
    return out.getvalue()


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    args.add_argument("--mb", type=float, nargs="+", default=[1.0, 5.0])
    args.add_argument("--smoke", action="store_true")
    opts = args.parse_args()
    sizes, n = ([0.25], 3) if opts.smoke else (opts.mb, 15)
    rows = []
    for mb in sizes:
        for fmt, media_type in (
            ("PNG", "image/png"),
            ("JPEG", "image/jpeg"),
            ("GIF", "image/gif"),
            ("WEBP", "image/webp"),
        ):
            data = made(mb, fmt)
            encoded = base64.b64encode(data).decode()
            part = [{"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{encoded}"}}]
            check = timed(lambda part=part: parts.check(part), n, 2)["p50_us"]
            decode = timed(lambda e=encoded: base64.b64decode(e, validate=True), n, 2)["p50_us"]
            whole = timed(lambda d=data, m=media_type: images.broken(m, d), n, 2)["p50_us"]
            size_mb = len(data) / 1e6
            rows.append(
                [fmt, f"{size_mb:.2f}", f"{check:,.0f}", f"{decode:,.0f}", f"{whole:,.0f}", f"{check / size_mb:,.0f}"]
            )
    print(table(["image", "MB", "check µs", "base64 decode µs", "whole µs", "check µs per MB"], rows))


if __name__ == "__main__":
    main()
