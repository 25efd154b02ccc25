"""Screenshots of an Android device: ``screencap -p`` through ``exec:``, or the emulator console.

* ``screencap``: ``exec:screencap -p`` (raw bytes, no shell mangling): the
  device renders a PNG of its framebuffer; works on any device.
* ``console``: ``screenrecord screenshot DIR`` on the emulator console: the
  emulator writes the PNG on its host (the sandbox runs next to its emulator, so
  the file is local); no work in the guest.

Either way the PNG is decoded with Pillow to an ``HxWx3`` uint8 array, resized
to the observation size when the device's screen differs.
"""

from __future__ import annotations

import io
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from env_adapters.android.device import ConsoleError, Device, DeviceGone, EmulatorConsole


def decode(png: bytes, size: tuple[int, int]) -> np.ndarray:
    """A PNG as an RGB array of ``size`` (width, height); DeviceGone if it is not an image."""
    try:
        image = Image.open(io.BytesIO(png))
        image.load()
    except (UnidentifiedImageError, OSError) as e:
        head = png[:120].decode(errors="replace")
        raise DeviceGone(f"the screenshot is not an image ({e}): {head!r}") from None
    if image.mode != "RGB":
        image = image.convert("RGB")
    if image.size != size:
        image = image.resize(size, Image.Resampling.BILINEAR)
    return np.asarray(image, dtype=np.uint8)


def screencap(device: Device) -> bytes:
    return device.exec_out("screencap -p")


def console_screenshot(console: EmulatorConsole) -> bytes:
    """A PNG through the emulator console (the newest file the emulator wrote)."""
    with tempfile.TemporaryDirectory(prefix="farm-android-shot-") as tmp:
        console.screenshot(tmp)
        deadline = time.monotonic() + 5.0
        while True:
            pngs = sorted(Path(tmp).glob("*.png"), key=lambda p: p.stat().st_mtime)
            if pngs:
                return pngs[-1].read_bytes()
            if time.monotonic() > deadline:
                raise ConsoleError(f"the emulator console wrote no screenshot into {tmp}")
            time.sleep(0.01)
