#!/usr/bin/python3
"""An independent PyTorch implementation of Loom's GPT (both styles) and its language-model
loss, checked against runs written by Loom (tests/reference/gpt_driver.cpp). Written from the
model's definition in src/loom/models/gpt/gpt.h and gpt.cpp, src/loom/nn/layers.h and the op
contracts in src/loom/ops/*.h; it imports no GPT code and uses torch's own ops (F.layer_norm,
F.gelu, F.silu, F.cross_entropy, ...). Computes in float64.

    /usr/bin/python3 tests/reference/gpt_reference.py OUT_DIR

(OUT_DIR as written by `reference_gpt_driver OUT_DIR`; run_reference.sh does both.)

The model, as Loom defines it: tokens -> embedding (+ a learned position embedding for gpt2)
-> depth pre-norm blocks h + attn(norm1(h)), then h + mlp(norm2(h)) -> final norm -> logits
through the token embedding (tied) or lm_head. Causal self-attention with a fused qkv Linear
whose output is [q (heads * Dh) | k (kv_heads * Dh) | v (kv_heads * Dh)], head-major; with
kv_heads < heads, each kv head serves heads / kv_heads consecutive query heads.

    gpt2:  LayerNorm (eps 1e-5, affine), GELU (tanh approximation) MLP of mlp_ratio * width
           hidden units, biases on every Linear
    llama: RMSNorm (eps 1e-6, weight), RoPE on q and k (rotate-half: pairs (i, i + Dh/2),
           angle position * theta^(-2i/Dh)), SwiGLU MLP w2(silu(w1 x) * w3 x) of
           swiglu_hidden units (0: 8/3 width rounded up to a multiple of 64), no biases

With config["moe"], every moe.every-th block's MLP is a mixture of experts (src/loom/nn/moe.h):
router logits x R^T (R (E, C), no bias); scores softmax(logits) or sigmoid(logits); each token
goes to the top_k experts by score + selection bias (the bias picks, it never weighs); its gates
are those experts' scores, divided by their sum (renormalize, and always for sigmoid); the
output is sum_j gate_j expert_j(x) (+ the shared experts' MLP), the experts the style's MLP
without biases, expert e's matrices w1[e] (H, C), w3[e] (H, C) (SwiGLU) and w2[e] (C, H).
Computed here densely: every expert on every token, then the chosen ones picked. Balancing:
aux_loss * E * sum_e f_e P_e (f_e: the fraction of the N top_k choices that went to e, a
constant; P_e: the mean of the router's distribution, the softmax or the sigmoids normalised
per token) + z_loss * mean(logsumexp(logits)^2), added to the gradient only: the loss value
stays the cross-entropy.
"""

import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_common as common  # noqa: E402

LAYER_NORM_EPS = 1e-5  # nn::LayerNorm's default, used by gpt2
RMS_NORM_EPS = 1e-6  # nn::RMSNorm's default, used by llama
IGNORE_INDEX = -100  # Gpt::loss: targets equal to -100 are left out of the mean


def is_llama(c):
    if c["style"] not in ("gpt2", "llama"):
        raise ValueError(f"unknown GPT style {c['style']!r}")
    return c["style"] == "llama"


def kv_heads(c):
    return c["kv_heads"] or c["heads"]


def mlp_hidden(c):
    if not is_llama(c):
        return int(c["mlp_ratio"] * c["width"])
    if c["swiglu_hidden"] > 0:
        return c["swiglu_hidden"]
    h = -(-8 * c["width"] // 3)  # ceil(8/3 width)
    return -(-h // 64) * 64


# --- parameters -------------------------------------------------------------------------------


def expected_parameters(c):
    """Loom's parameters in registration order (Gpt::Gpt, GptBlock::GptBlock, nn layers): name ->
    (shape, weight decay). Loom decays Linear weights only, never biases, norms or embeddings."""
    llama = is_llama(c)
    V, C, hidden = c["vocab_size"], c["width"], mlp_hidden(c)
    Dh = C // c["heads"]
    bias = not llama
    out = {}

    def linear(name, fan_in, fan_out, with_bias):
        out[name + ".weight"] = ([fan_out, fan_in], True)
        if with_bias:
            out[name + ".bias"] = ([fan_out], False)

    def norm(name):
        out[name + ".weight"] = ([C], False)
        if not llama:
            out[name + ".bias"] = ([C], False)

    out["tok_embed.weight"] = ([V, C], False)
    if not llama:
        out["pos_embed.weight"] = ([c["context"], C], False)
    moe = c.get("moe")
    for i in range(c["depth"]):
        b = f"blocks.{i}."
        norm(b + "norm1")
        linear(b + "attn.qkv", C, (c["heads"] + 2 * kv_heads(c)) * Dh, bias)
        linear(b + "attn.proj", C, C, bias)
        norm(b + "norm2")
        if moe_block(c, i):
            E, He = moe["experts"], moe["hidden"]
            out[b + "mlp.w1"] = ([E, He, C], True)
            if llama:
                out[b + "mlp.w3"] = ([E, He, C], True)
            out[b + "mlp.w2"] = ([E, C, He], True)
            linear(b + "mlp.router", C, E, False)
            if moe["shared_experts"]:
                Hs = moe["shared_experts"] * He
                if llama:
                    for n, (i_, o_) in (("w1", (C, Hs)), ("w2", (Hs, C)), ("w3", (C, Hs))):
                        linear(b + "mlp.shared." + n, i_, o_, False)
                else:
                    linear(b + "mlp.shared.fc1", C, Hs, True)
                    linear(b + "mlp.shared.fc2", Hs, C, True)
        elif llama:
            linear(b + "mlp.w1", C, hidden, False)
            linear(b + "mlp.w2", hidden, C, False)
            linear(b + "mlp.w3", C, hidden, False)
        else:
            linear(b + "mlp.fc1", C, hidden, True)
            linear(b + "mlp.fc2", hidden, C, True)
    norm("norm_f")
    if not c["tie_embeddings"]:
        linear("lm_head", C, V, False)
    return out


# --- the layers ---------------------------------------------------------------------------------


def linear(x, P, name):  # y = x W^T (+ b), W (out, in)
    b = P.get(name + ".bias")
    return F.linear(x, P[name + ".weight"], b)


def norm(x, P, name, c):
    if is_llama(c):  # RMSNorm: x / sqrt(mean(x^2) + eps) * weight
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_NORM_EPS) * P[name + ".weight"]
    return F.layer_norm(x, (x.shape[-1],), P[name + ".weight"], P[name + ".bias"], LAYER_NORM_EPS)


def rope(x, theta):
    """x (B, H, T, Dh), positions 0..T-1; rotate-half pairing (i, i + Dh/2)."""
    T, Dh = x.shape[-2], x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, Dh, 2, dtype=torch.float64) / Dh)  # (Dh/2)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (T, Dh/2)
    cos = torch.cat([angles.cos(), angles.cos()], dim=-1)
    sin = torch.cat([angles.sin(), angles.sin()], dim=-1)
    x1, x2 = x[..., : Dh // 2], x[..., Dh // 2 :]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def attention(x, P, name, c):
    B, T, C = x.shape
    H, Hkv = c["heads"], kv_heads(c)
    Dh = C // H
    q, k, v = linear(x, P, name + ".qkv").split([H * Dh, Hkv * Dh, Hkv * Dh], dim=-1)
    q = q.reshape(B, T, H, Dh).transpose(1, 2)  # (B, H, T, Dh)
    k = k.reshape(B, T, Hkv, Dh).transpose(1, 2)  # (B, Hkv, T, Dh)
    v = v.reshape(B, T, Hkv, Dh).transpose(1, 2)
    if is_llama(c):
        q, k = rope(q, c["rope_theta"]), rope(k, c["rope_theta"])
    k = k.repeat_interleave(H // Hkv, dim=1)  # query head h reads kv head h // (H / Hkv)
    v = v.repeat_interleave(H // Hkv, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(Dh)  # (B, H, T, T)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)  # key j > query i
    att = torch.softmax(scores.masked_fill(future, -math.inf), dim=-1)
    o = (att @ v).transpose(1, 2).reshape(B, T, C)
    return linear(o, P, name + ".proj")


def mlp(x, P, name, c):
    if is_llama(c):
        return linear(F.silu(linear(x, P, name + ".w1")) * linear(x, P, name + ".w3"), P, name + ".w2")
    return linear(F.gelu(linear(x, P, name + ".fc1"), approximate="tanh"), P, name + ".fc2")


def moe_block(c, i):
    moe = c.get("moe")
    return bool(moe) and (i + 1) % moe["every"] == 0


def mixture(x, P, name, c):
    """x (B, T, C) -> (output (B, T, C), the weighted balancing losses)."""
    m = c["moe"]
    E, k = m["experts"], m["top_k"]
    B, T, C = x.shape
    x2 = x.reshape(-1, C)  # (N, C)
    N = x2.shape[0]
    logits = x2 @ P[name + ".router.weight"].T  # (N, E)
    softmax = m["gating"] == "softmax"
    scores = torch.softmax(logits, -1) if softmax else torch.sigmoid(logits)
    bias = torch.tensor(m["selection_bias"][name], dtype=torch.float64)
    chosen = torch.topk(scores.detach() + bias, k, dim=-1).indices  # (N, k)
    gates = scores.gather(1, chosen)
    if m["renormalize"] or not softmax:
        gates = gates / gates.sum(-1, keepdim=True)
    llama = is_llama(c)
    outs = []
    for e in range(E):  # every expert on every token: (N, C) each
        w1, w2 = P[name + ".w1"][e], P[name + ".w2"][e]
        if llama:
            h = F.silu(x2 @ w1.T) * (x2 @ P[name + ".w3"][e].T)
        else:
            h = F.gelu(x2 @ w1.T, approximate="tanh")
        outs.append(h @ w2.T)
    outs = torch.stack(outs)  # (E, N, C)
    rows = torch.arange(N)
    y = sum(gates[:, j : j + 1] * outs[chosen[:, j], rows] for j in range(k))
    if m["shared_experts"]:
        y = y + mlp(x2, P, name + ".shared", c)
    p = scores if softmax else scores / scores.sum(-1, keepdim=True)
    f = torch.bincount(chosen.reshape(-1), minlength=E).to(torch.float64) / (N * k)
    aux = E * (f * p.mean(0)).sum()
    z = torch.logsumexp(logits, -1).pow(2).mean()
    return y.reshape(B, T, C), m["aux_loss"] * aux + m["z_loss"] * z


# --- the model ---------------------------------------------------------------------------------


def gpt_forward(P, ids, c):
    """ids (B, T) int64 -> (logits (B, T, vocab_size), the mixtures' balancing losses)."""
    T = ids.shape[1]
    balancing = torch.zeros((), dtype=torch.float64)
    h = F.embedding(ids, P["tok_embed.weight"])
    if not is_llama(c):
        h = h + P["pos_embed.weight"][:T][None]
    for i in range(c["depth"]):
        b = f"blocks.{i}."
        h = h + attention(norm(h, P, b + "norm1", c), P, b + "attn", c)
        if moe_block(c, i):
            y, bal = mixture(norm(h, P, b + "norm2", c), P, b + "mlp", c)
            h, balancing = h + y, balancing + bal
        else:
            h = h + mlp(norm(h, P, b + "norm2", c), P, b + "mlp", c)
    out_weight = P["tok_embed.weight"] if c["tie_embeddings"] else P["lm_head.weight"]
    return F.linear(norm(h, P, "norm_f", c), out_weight), balancing


def load_batch(case_dir, meta):
    files = meta["batch"]
    get = lambda key: common.read_npy(os.path.join(case_dir, files[key])).to(torch.int64)  # noqa: E731
    return {"ids": get("ids"), "targets": get("targets")}


def loss(P, batch, c):
    """Mean next-token cross-entropy over the targets that are not IGNORE_INDEX; the balancing
    losses join its gradient (bal - bal.detach() is 0 in value)."""
    logits, balancing = gpt_forward(P, batch["ids"], c)
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["targets"].reshape(-1),
                         ignore_index=IGNORE_INDEX)
    return ce + (balancing - balancing.detach())


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} OUT_DIR (written by reference_gpt_driver)", file=sys.stderr)
        sys.exit(2)
    sys.exit(common.run_cases(sys.argv[1], sys.modules[__name__]))
