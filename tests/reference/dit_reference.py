#!/usr/bin/python3
"""An independent PyTorch implementation of Loom's DiT and flow-matching loss, checked against
a run written by Loom (tests/reference/dit_driver.cpp). Written from the semantics of
src/loom/models/dit/dit.cpp, src/loom/nn/layers.cpp, src/loom/ops/*.h and
src/loom/diffusion/flow_matching.cpp; it imports no DiT code, only torch. Computes in float64.

    /usr/bin/python3 tests/reference/dit_reference.py OUT_DIR

(OUT_DIR as written by `reference_dit_driver OUT_DIR`; run_reference.sh does both.)
"""

import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_common as common  # noqa: E402

FREQ_DIM = 256  # the timestep's sinusoidal embedding size (Dit::Dit: t_embed.fc1 is 256 -> D)
NORM_EPS = 1e-6  # every LayerNorm of the DiT is LayerNorm(D, affine=false, eps=1e-6)


# --- parameters -------------------------------------------------------------------------------


def expected_parameters(c):
    """Loom's parameters in registration order (Dit::Dit, DitBlock::DitBlock): name -> (shape,
    weight decay). Loom decays Linear weights only, never biases, norms or embeddings."""
    D, p, C = c["width"], c["patch"], c["channels"]
    hidden = int(D * c["mlp_ratio"])
    out = {}

    def linear(name, fan_in, fan_out):
        out[name + ".weight"] = ([fan_out, fan_in], True)
        out[name + ".bias"] = ([fan_out], False)

    linear("patch_embed", C * p * p, D)
    linear("t_embed.fc1", FREQ_DIM, D)
    linear("t_embed.fc2", D, D)
    out["y_embed.weight"] = ([c["num_classes"] + 1, D], False)
    for i in range(c["depth"]):
        b = f"blocks.{i}."
        linear(b + "attn.qkv", D, 3 * D)
        linear(b + "attn.proj", D, D)
        linear(b + "mlp.fc1", D, hidden)
        linear(b + "mlp.fc2", hidden, D)
        linear(b + "ada", D, 6 * D)
    linear("final.ada", D, 2 * D)
    linear("final.linear", D, p * p * C)
    return out


# --- the ops, as Loom defines them --------------------------------------------------------------


def linear(x, P, name):  # y = x W^T + b, W (out, in)
    return x @ P[name + ".weight"].t() + P[name + ".bias"]


def silu(x):
    return x * torch.sigmoid(x)


def gelu_tanh(x):  # ops/activation.h: tanh approximation
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def layer_norm(x, eps=NORM_EPS):  # biased variance over the last dim, no affine part
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)


def modulate(x, shift, scale):  # x (B, T, D), shift/scale (B, D)
    return x * (1.0 + scale[:, None, :]) + shift[:, None, :]


def attention(x, P, name, heads):
    """Multi-head self-attention: qkv output split [q | k | v], each (B, T, H*Dh) with head h in
    columns [h*Dh, (h+1)*Dh); softmax(q k^T / sqrt(Dh)) v; heads concatenated back; proj."""
    B, T, D = x.shape
    Dh = D // heads
    q, k, v = linear(x, P, name + ".qkv").split(D, dim=-1)

    def split_heads(t):  # (B, T, D) -> (B, H, T, Dh)
        return t.reshape(B, T, heads, Dh).permute(0, 2, 1, 3)

    q, k, v = split_heads(q), split_heads(k), split_heads(v)
    att = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(Dh), dim=-1)  # (B, H, T, T)
    o = (att @ v).permute(0, 2, 1, 3).reshape(B, T, D)
    return linear(o, P, name + ".proj")


def timestep_embedding(t, dim, max_period=10000.0):
    """(B) -> (B, dim): [cos(t f_i) | sin(t f_i)], f_i = exp(-ln(max_period) i / (dim/2))."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float64) / half)
    args = t[:, None] * freqs[None, :]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def sincos_pos_embed_2d(dim, grid):
    """(grid*grid, dim), token r*grid + c: [sin(c w) | cos(c w) | sin(r w) | cos(r w)],
    w_k = 10000^(-k / (dim/4))."""
    quarter = dim // 4
    omega = 1.0 / 10000.0 ** (torch.arange(quarter, dtype=torch.float64) / quarter)
    rows, cols = torch.meshgrid(torch.arange(grid, dtype=torch.float64), torch.arange(grid, dtype=torch.float64),
                                indexing="ij")
    r = rows.reshape(-1, 1) * omega[None, :]
    c = cols.reshape(-1, 1) * omega[None, :]
    return torch.cat([torch.sin(c), torch.cos(c), torch.sin(r), torch.cos(r)], dim=-1)


# --- the model ---------------------------------------------------------------------------------


def dit_forward(P, x, t, y, c):
    """x (B, C, S, S), t (B) in [0, 1], y (B) int64 -> velocity (B, C, S, S)."""
    B = x.shape[0]
    C, S, p, D, H = c["channels"], c["image_size"], c["patch"], c["width"], c["heads"]
    g = S // p
    # Patchify: token (r, col) holds pixels [:, r p : (r+1) p, col p : (col+1) p], flattened (C, p, p).
    patches = x.reshape(B, C, g, p, g, p).permute(0, 2, 4, 1, 3, 5).reshape(B, g * g, C * p * p)
    h = linear(patches, P, "patch_embed") + sincos_pos_embed_2d(D, g)[None]
    # Conditioning: timestep scaled to 0..1000, sinusoidal embedding, MLP; plus class embedding.
    temb = linear(silu(linear(timestep_embedding(t * 1000.0, FREQ_DIM), P, "t_embed.fc1")), P, "t_embed.fc2")
    cond = temb + P["y_embed.weight"][y]
    sc = silu(cond)
    for i in range(c["depth"]):
        b = f"blocks.{i}."
        shift1, scale1, gate1, shift2, scale2, gate2 = linear(sc, P, b + "ada").split(D, dim=-1)
        h = h + gate1[:, None, :] * attention(modulate(layer_norm(h), shift1, scale1), P, b + "attn", H)
        m = modulate(layer_norm(h), shift2, scale2)
        h = h + gate2[:, None, :] * linear(gelu_tanh(linear(m, P, b + "mlp.fc1")), P, b + "mlp.fc2")
    shift, scale = linear(sc, P, "final.ada").split(D, dim=-1)
    out = linear(modulate(layer_norm(h), shift, scale), P, "final.linear")  # (B, T, p p C)
    # Unpatchify: each token's outputs are ordered (p, p, C).
    out = out.reshape(B, g, g, p, p, C).permute(0, 5, 1, 3, 2, 4)
    return out.reshape(B, C, S, S)


def load_batch(case_dir, meta):
    files = meta["batch"]
    get = lambda key: common.read_npy(os.path.join(case_dir, files[key]))  # noqa: E731
    return {
        "x0": get("x0").to(torch.float64),
        "eps": get("eps").to(torch.float64),
        "t": get("t").to(torch.float64),
        "labels": get("labels").to(torch.int64),
    }


def loss(P, batch, c):
    """Flow matching (diffusion/flow_matching.cpp) with the draws given:
    x_t = x0 + t (eps - x0), loss = mean((v(x_t, t, y) - (eps - x0))^2)."""
    x0, eps, t, y = batch["x0"], batch["eps"], batch["t"], batch["labels"]
    target = eps - x0
    xt = x0 + t[:, None, None, None] * target
    return ((dit_forward(P, xt, t, y, c) - target) ** 2).mean()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} OUT_DIR (written by reference_dit_driver)", file=sys.stderr)
        sys.exit(2)
    sys.exit(common.run_cases(sys.argv[1], sys.modules[__name__]))
