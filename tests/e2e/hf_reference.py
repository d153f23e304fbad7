"""Greedy continuation of a prompt by a Hugging Face model directory that `loom ckpt export
--format hf` wrote, computed here in numpy (float64) from Hugging Face's definitions of
GPT2LMHeadModel and LlamaForCausalLM as they read config.json and model.safetensors: Conv1D
weights applied as x @ W + b, GELU "gelu_new", LayerNorm; q/k/v/o projections, rotate-half
RoPE, RMSNorm, SiLU-gated MLP, grouped-query heads. Byte-level tokens (a vocabulary of 256).

Usage: hf_reference.py MODEL_DIR PROMPT TOKENS [LOGITS.npy RTOL]
Prints the prompt and its continuation, and the smallest gap between the top two logits seen
(a small one would make a greedy comparison fragile). With LOGITS.npy (what `loom sample
--logits` wrote for the same prompt): exits 1 unless every logit of the prompt is within
RTOL x max|logit| of this computation's."""
import json
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    assert meta.get("format") == "pt", meta
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        raw = data[a:b]
        if e["dtype"] == "F32":
            v = np.frombuffer(raw, dtype="<f4")
        elif e["dtype"] == "BF16":
            v = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(e["dtype"])
        out[name] = v.reshape(e["shape"]).astype(np.float64)
    return out


def layer_norm(x, w, b, eps):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w + b


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def attention(q, k, v):  # (H, T, D) each, causal
    T, D = q.shape[1], q.shape[2]
    s = q @ k.transpose(0, 2, 1) / np.sqrt(D)
    s = s + np.triu(np.full((T, T), -np.inf), 1)
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)) @ v


def gpt2_logits(w, c, ids):
    T, H = len(ids), c["n_head"]
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:T]
    eps = c["layer_norm_epsilon"]
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        h = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = np.split(qkv, 3, axis=-1)
        heads = lambda t: t.reshape(T, H, -1).transpose(1, 0, 2)
        o = attention(heads(q), heads(k), heads(v)).transpose(1, 0, 2).reshape(T, -1)
        x = x + o @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        h = h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]
        h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))  # gelu_new
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layer_norm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    head = w["transformer.wte.weight"] if c["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


def rope(x, theta):  # (H, T, D), rotate-half pairs (i, i + D/2)
    H, T, D = x.shape
    inv = theta ** (-np.arange(0, D, 2) / D)
    ang = np.arange(T)[:, None] * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)
    a, b = x[..., : D // 2], x[..., D // 2:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def llama_logits(w, c, ids):
    T, H, Hkv, D = len(ids), c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    x = w["model.embed_tokens.weight"][ids]
    eps = c["rms_norm_eps"]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, H, D).transpose(1, 0, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, Hkv, D).transpose(1, 0, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, Hkv, D).transpose(1, 0, 2)
        q, k = rope(q, c["rope_theta"]), rope(k, c["rope_theta"])
        k, v = np.repeat(k, H // Hkv, axis=0), np.repeat(v, H // Hkv, axis=0)
        o = attention(q, k, v).transpose(1, 0, 2).reshape(T, H * D)
        x = x + o @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g, u = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if c["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


def main():
    model_dir, prompt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    c = json.load(open(f"{model_dir}/config.json"))
    w = read_safetensors(f"{model_dir}/model.safetensors")
    logits = {"GPT2LMHeadModel": gpt2_logits, "LlamaForCausalLM": llama_logits}[c["architectures"][0]]
    ids = list(prompt.encode())
    if len(sys.argv) > 4:
        got, want = np.load(sys.argv[4]).astype(np.float64), logits(w, c, np.array(ids))
        assert got.shape == want.shape, (got.shape, want.shape)
        err = np.abs(got - want).max() / np.abs(want).max()
        sys.stderr.write(f"prompt logits: max difference {err:.2e} of max|logit| (bound {sys.argv[5]})\n")
        if err > float(sys.argv[5]):
            sys.exit(1)
    gap = np.inf
    for _ in range(n):
        z = logits(w, c, np.array(ids))[-1]
        top = np.sort(z)[-2:]
        gap = min(gap, top[1] - top[0])
        ids.append(int(np.argmax(z)))
    sys.stdout.write(bytes(ids).decode("utf-8", "replace"))
    sys.stderr.write(f"smallest top-2 logit gap {gap:.3g}\n")


main()
