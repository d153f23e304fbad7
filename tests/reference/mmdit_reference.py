#!/usr/bin/python3
"""An independent PyTorch implementation of Loom's MMDiT (joint attention over caption and image
tokens, a weight set per modality, QK-norm, a caption encoder trained with it; or PixArt's
cross-attention blocks) and its flow-matching loss, checked against a run written by Loom (tests/reference/mmdit_driver.cpp).
Written from the semantics of src/loom/models/mmdit/mmdit.cpp, src/loom/nn/layers.cpp and
src/loom/ops/*.h; it imports no Loom code, only torch and the DiT reference's generic ops.
Computes in float64.

    /usr/bin/python3 tests/reference/mmdit_reference.py OUT_DIR
"""

import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_common as common  # noqa: E402
from dit_reference import (  # noqa: E402  the ops as Loom defines them, shared with the DiT's
    FREQ_DIM,
    gelu_tanh,
    layer_norm,
    linear,
    modulate,
    silu,
    sincos_pos_embed_2d,
    timestep_embedding,
)

TEXT_NORM_EPS = 1e-5  # the caption encoder's LayerNorms (nn::LayerNorm's default, affine)
QK_NORM_EPS = 1e-6  # RMSNorm of each head's q and k


def expected_parameters(c):
    """name -> (shape, weight decay): Linear weights decay; biases, norms, the token embedding and
    the caption's learned positions do not."""
    D, p, C, L, V = c["width"], c["patch"], c["channels"], c["text_length"], c["vocab"]
    hidden, Dh = int(D * c["mlp_ratio"]), D // c["heads"]
    out = {}

    def lin(name, fan_in, fan_out):
        out[name + ".weight"] = ([fan_out, fan_in], True)
        out[name + ".bias"] = ([fan_out], False)

    def norm(name, dim, bias=True):
        out[name + ".weight"] = ([dim], False)
        if bias:
            out[name + ".bias"] = ([dim], False)

    out["text.tokens.weight"] = ([V, D], False)
    out["text.positions"] = ([L, D], False)
    for i in range(c["text_depth"]):
        b = f"text.blocks.{i}."
        norm(b + "norm1", D)
        lin(b + "attn.qkv", D, 3 * D)
        lin(b + "attn.proj", D, D)
        norm(b + "norm2", D)
        lin(b + "mlp.fc1", D, hidden)
        lin(b + "mlp.fc2", hidden, D)
    norm("text.norm", D)
    lin("patch_embed", C * p * p, D)
    lin("t_embed.fc1", FREQ_DIM, D)
    lin("t_embed.fc2", D, D)
    lin("text_pool", D, D)
    for i in range(c["depth"]):
        if c["conditioning"] == "cross":
            b = f"blocks.{i}."
            lin(b + "ada", D, 6 * D)
            lin(b + "attn.qkv", D, 3 * D)
            lin(b + "attn.proj", D, D)
            for name in ("q", "k", "v", "proj"):
                lin(b + "cross." + name, D, D)
            del out[b + "cross.k.bias"]  # none: a key bias does not change the softmax
            lin(b + "mlp.fc1", D, hidden)
            lin(b + "mlp.fc2", hidden, D)
            continue
        for s in ("text", "image"):
            b = f"blocks.{i}.{s}."
            lin(b + "ada", D, 6 * D)
            lin(b + "attn.qkv", D, 3 * D)
            lin(b + "attn.proj", D, D)
            norm(b + "q_norm", Dh, bias=False)
            norm(b + "k_norm", Dh, bias=False)
            lin(b + "mlp.fc1", D, hidden)
            lin(b + "mlp.fc2", hidden, D)
    lin("final.ada", D, 2 * D)
    lin("final.linear", D, p * p * C)
    return out


def affine_layer_norm(x, P, name):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + TEXT_NORM_EPS) * P[name + ".weight"] + P[name + ".bias"]


def rms_norm(x, w):
    return x / torch.sqrt((x**2).mean(-1, keepdim=True) + QK_NORM_EPS) * w


def mlp(x, P, name):
    return linear(gelu_tanh(linear(x, P, name + ".fc1")), P, name + ".fc2")


def split_heads(t, heads):  # (B, n, H Dh) -> (B, n, H, Dh)
    B, n, D = t.shape
    return t.reshape(B, n, heads, D // heads)


def attend(q, k, v):  # (B, n, H, Dh) each -> (B, n, H Dh)
    B, n, H, Dh = q.shape
    q, k, v = (x.permute(0, 2, 1, 3) for x in (q, k, v))
    att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(Dh), dim=-1)
    return (att @ v).permute(0, 2, 1, 3).reshape(B, n, H * Dh)


def encode_text(P, ids, c):
    h = P["text.tokens.weight"][ids] + P["text.positions"][None]
    for i in range(c["text_depth"]):
        b = f"text.blocks.{i}."
        q, k, v = linear(affine_layer_norm(h, P, b + "norm1"), P, b + "attn.qkv").split(c["width"], dim=-1)
        h = h + linear(attend(*(split_heads(x, c["heads"]) for x in (q, k, v))), P, b + "attn.proj")
        h = h + mlp(affine_layer_norm(h, P, b + "norm2"), P, b + "mlp")
    return affine_layer_norm(h, P, "text.norm")


def joint_block(P, i, text, image, cond, c):
    """Each stream modulated by its own adaLN, its own q, k, v (q and k RMS-normalised per head);
    one softmax over the caption's and the image's keys together; its own projection and MLP."""
    D, H = c["width"], c["heads"]
    streams = {"text": text, "image": image}
    mods, qs, ks, vs = {}, [], [], []
    for s, x in streams.items():
        b = f"blocks.{i}.{s}."
        mods[s] = linear(silu(cond), P, b + "ada").split(D, dim=-1)
        n = modulate(layer_norm(x), mods[s][0], mods[s][1])
        q, k, v = (split_heads(t, H) for t in linear(n, P, b + "attn.qkv").split(D, dim=-1))
        qs.append(rms_norm(q, P[b + "q_norm.weight"]))
        ks.append(rms_norm(k, P[b + "k_norm.weight"]))
        vs.append(v)
    o = attend(torch.cat(qs, 1), torch.cat(ks, 1), torch.cat(vs, 1))
    L = text.shape[1]
    out = {}
    for s, o_s in (("text", o[:, :L]), ("image", o[:, L:])):
        b = f"blocks.{i}.{s}."
        shift1, scale1, gate1, shift2, scale2, gate2 = mods[s]
        x = streams[s] + gate1[:, None, :] * linear(o_s, P, b + "attn.proj")
        out[s] = x + gate2[:, None, :] * mlp(modulate(layer_norm(x), shift2, scale2), P, b + "mlp")
    return out["text"], out["image"]


def cross_block(P, i, text, image, cond, c):
    """PixArt: self-attention over the image (adaLN-modulated, gated), a plain residual
    cross-attention from the image to the caption, the MLP (modulated, gated); the caption's
    tokens are not changed."""
    D, H = c["width"], c["heads"]
    b = f"blocks.{i}."
    shift1, scale1, gate1, shift2, scale2, gate2 = linear(silu(cond), P, b + "ada").split(D, dim=-1)
    q, k, v = linear(modulate(layer_norm(image), shift1, scale1), P, b + "attn.qkv").split(D, dim=-1)
    x = image + gate1[:, None, :] * linear(attend(*(split_heads(t, H) for t in (q, k, v))), P, b + "attn.proj")
    q = split_heads(linear(x, P, b + "cross.q"), H)
    k = split_heads(text @ P[b + "cross.k.weight"].t(), H)
    v = split_heads(linear(text, P, b + "cross.v"), H)
    B, T, _, Dh = q.shape
    att = torch.softmax(q.permute(0, 2, 1, 3) @ k.permute(0, 2, 3, 1) / math.sqrt(Dh), dim=-1)
    o = (att @ v.permute(0, 2, 1, 3)).permute(0, 2, 1, 3).reshape(B, T, D)
    x = x + linear(o, P, b + "cross.proj")
    x = x + gate2[:, None, :] * mlp(modulate(layer_norm(x), shift2, scale2), P, b + "mlp")
    return text, x


def mmdit_forward(P, x, t, ids, c):
    B = x.shape[0]
    C, S, p, D = c["channels"], c["image_size"], c["patch"], c["width"]
    g = S // p
    patches = x.reshape(B, C, g, p, g, p).permute(0, 2, 4, 1, 3, 5).reshape(B, g * g, C * p * p)
    image = linear(patches, P, "patch_embed") + sincos_pos_embed_2d(D, g)[None]
    text = encode_text(P, ids, c)
    temb = linear(silu(linear(timestep_embedding(t * 1000.0, FREQ_DIM), P, "t_embed.fc1")), P, "t_embed.fc2")
    cond = temb + linear(text.mean(1), P, "text_pool")
    block = cross_block if c["conditioning"] == "cross" else joint_block
    for i in range(c["depth"]):
        text, image = block(P, i, text, image, cond, c)
    shift, scale = linear(silu(cond), P, "final.ada").split(D, dim=-1)
    out = linear(modulate(layer_norm(image), shift, scale), P, "final.linear")
    out = out.reshape(B, g, g, p, p, C).permute(0, 5, 1, 3, 2, 4)
    return out.reshape(B, C, S, S)


def load_batch(case_dir, meta):
    files = meta["batch"]
    get = lambda key: common.read_npy(os.path.join(case_dir, files[key]))  # noqa: E731
    return {
        "x0": get("x0").to(torch.float64),
        "eps": get("eps").to(torch.float64),
        "t": get("t").to(torch.float64),
        "captions": get("captions").to(torch.int64),
    }


def loss(P, batch, c):
    x0, eps, t = batch["x0"], batch["eps"], batch["t"]
    target = eps - x0
    xt = x0 + t[:, None, None, None] * target
    return ((mmdit_forward(P, xt, t, batch["captions"], c) - target) ** 2).mean()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} OUT_DIR (written by reference_mmdit_driver)", file=sys.stderr)
        sys.exit(2)
    sys.exit(common.run_cases(sys.argv[1], sys.modules[__name__]))
