"""An independent PyTorch implementation of Loom's KL autoencoder and its training loss, checked
against a run written by Loom (tests/reference/autoencoder_driver.cpp). Written from the
semantics of src/loom/models/autoencoder/autoencoder.cpp, src/loom/ops/conv.h and
src/loom/train/recipes/autoencoder.cpp; it imports no Loom code. The convolutions are torch's
own (F.conv2d, channels first), the pixel (un)shuffle torch's, with Loom's channel order (dy, dx,
c) mapped onto torch's (c, dy, dx). Computes in float64.

    /usr/bin/python3 tests/reference/autoencoder_reference.py OUT_DIR
"""

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_common as common  # noqa: E402

NORM_EPS = 1e-5  # nn::LayerNorm's default


def level_width(c, level):
    return c["width"] << level


def expected_parameters(c):
    out = {}
    C, L, z = c["channels"], c["downsamples"], c["latent_channels"]

    def conv(name, cin, cout):
        out[name + ".weight"] = ([cout, 9 * cin], True)
        out[name + ".bias"] = ([cout], False)

    def norm(name, dim):
        out[name + ".weight"] = ([dim], False)
        out[name + ".bias"] = ([dim], False)

    def block(name, w):
        norm(name + ".norm1", w)
        conv(name + ".conv1", w, w)
        norm(name + ".norm2", w)
        conv(name + ".conv2", w, w)

    for l in range(L):
        conv(f"down.{l}", 4 * (C if l == 0 else level_width(c, l - 1)), level_width(c, l))
        block(f"encoder.{l}", level_width(c, l))
    top = level_width(c, L - 1)
    norm("enc_norm", top)
    conv("enc_out", top, 2 * z)
    conv("dec_in", z, top)
    block("mid", top)
    for l in range(L):
        block(f"decoder.{l}", level_width(c, l))
        norm(f"up_norm.{l}", level_width(c, l))
        conv(f"up.{l}", level_width(c, l), 4 * (C if l == 0 else level_width(c, l - 1)))
    return out


def conv(x, P, name):
    """3x3 'same' convolution of x (B, C, H, W); Loom's weight (out, 9 in) holds each filter as
    (ky, kx, c)."""
    w = P[name + ".weight"]
    cout, cin = w.shape[0], w.shape[1] // 9
    return F.conv2d(x, w.reshape(cout, 3, 3, cin).permute(0, 3, 1, 2), P[name + ".bias"], padding=1)


def norm(x, P, name):
    """LayerNorm over each pixel's channels of x (B, C, H, W)."""
    y = F.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), P[name + ".weight"], P[name + ".bias"], NORM_EPS)
    return y.permute(0, 3, 1, 2)


def silu(x):
    return x * torch.sigmoid(x)


def unshuffle(x):
    """(B, C, H, W) -> (B, 4C, H/2, W/2), channel (dy, dx, c) as Loom orders it; torch's is (c, dy, dx)."""
    B, C, H, W = x.shape
    y = F.pixel_unshuffle(x, 2).reshape(B, C, 4, H // 2, W // 2)
    return y.permute(0, 2, 1, 3, 4).reshape(B, 4 * C, H // 2, W // 2)


def shuffle(x):
    """The inverse: (B, 4C, H, W) with channels (dy, dx, c) -> (B, C, 2H, 2W)."""
    B, C4, H, W = x.shape
    C = C4 // 4
    y = x.reshape(B, 4, C, H, W).permute(0, 2, 1, 3, 4).reshape(B, 4 * C, H, W)
    return F.pixel_shuffle(y, 2)


def res_block(x, P, name):
    h = conv(silu(norm(x, P, name + ".norm1")), P, name + ".conv1")
    return x + conv(silu(norm(h, P, name + ".norm2")), P, name + ".conv2")


def encode(P, x, c):
    h = x
    for l in range(c["downsamples"]):
        h = res_block(conv(unshuffle(h), P, f"down.{l}"), P, f"encoder.{l}")
    h = conv(silu(norm(h, P, "enc_norm")), P, "enc_out")
    z = c["latent_channels"]
    return h[:, :z], h[:, z:]


def decode(P, z, c):
    h = res_block(conv(z, P, "dec_in"), P, "mid")
    for l in reversed(range(c["downsamples"])):
        h = res_block(h, P, f"decoder.{l}")
        h = shuffle(conv(silu(norm(h, P, f"up_norm.{l}")), P, f"up.{l}"))
    return h


def load_batch(case_dir, meta):
    files = meta["batch"]
    get = lambda key: common.read_npy(os.path.join(case_dir, files[key])).to(torch.float64)  # noqa: E731
    return {"x": get("x"), "noise": get("noise")}


def loss(P, batch, c):
    x, noise = batch["x"], batch["noise"]
    mean, logvar = encode(P, x, c)
    error = decode(P, mean + torch.exp(0.5 * logvar) * noise, c) - x
    reconstruction = error.abs().mean() if c["l1"] else (error**2).mean()
    kl = 0.5 * (mean**2 + torch.exp(logvar) - 1.0 - logvar).mean()
    return reconstruction + c["kl_weight"] * kl


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} OUT_DIR (written by reference_autoencoder_driver)", file=sys.stderr)
        sys.exit(2)
    sys.exit(common.run_cases(sys.argv[1], sys.modules[__name__]))
