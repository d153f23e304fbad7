"""Loom's benchmark models written the way a PyTorch 2.x user writes them at their best:
nn.Module, fused qkv, F.scaled_dot_product_attention, F.layer_norm / F.gelu, bf16 autocast
outside. Same shapes and parameter counts as Loom's GPT (gpt2 style) and DiT, so a step does the
same arithmetic; the math follows tests/reference/ (the float64 parity references), the code does
not share theirs: these are for timing.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads, causal):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):  # (B, T, C)
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)  # 3 x (B, H, T, Dh)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)  # (B, H, T, Dh)
        return self.proj(o.transpose(1, 2).reshape(B, T, C))


class Mlp(nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(width, hidden), nn.Linear(hidden, width)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class GptBlock(nn.Module):
    def __init__(self, width, heads, hidden):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, causal=True)
        self.mlp = Mlp(width, hidden)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Gpt(nn.Module):
    """GPT-2: learned positions, pre-norm blocks, tied embeddings."""

    def __init__(self, vocab_size, context, width, depth, heads, mlp_ratio):
        super().__init__()
        self.tok_embed = nn.Embedding(vocab_size, width)
        self.pos_embed = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(GptBlock(width, heads, int(width * mlp_ratio)) for _ in range(depth))
        self.norm_f = nn.LayerNorm(width)

    def forward(self, ids, targets):  # ids, targets (B, T)
        T = ids.shape[1]
        h = self.tok_embed(ids) + self.pos_embed.weight[:T]  # (B, T, C)
        for block in self.blocks:
            h = block(h)
        logits = F.linear(self.norm_f(h), self.tok_embed.weight)  # (B, T, V)
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def timestep_embedding(t, dim):  # (B) -> (B, dim)
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None] * freqs[None, :]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def sincos_pos_embed_2d(dim, grid):  # (grid * grid, dim)
    quarter = dim // 4
    omega = 1.0 / 10000.0 ** (torch.arange(quarter, dtype=torch.float32) / quarter)
    rows, cols = torch.meshgrid(torch.arange(grid, dtype=torch.float32), torch.arange(grid, dtype=torch.float32),
                                indexing="ij")
    r, c = rows.reshape(-1, 1) * omega, cols.reshape(-1, 1) * omega
    return torch.cat([torch.sin(c), torch.cos(c), torch.sin(r), torch.cos(r)], dim=-1)


def modulate(x, shift, scale):  # x (B, T, D), shift/scale (B, D)
    return x * (1 + scale[:, None]) + shift[:, None]


class DitBlock(nn.Module):
    def __init__(self, width, heads, hidden):
        super().__init__()
        self.attn = CausalSelfAttention(width, heads, causal=False)
        self.mlp = Mlp(width, hidden)
        self.ada = nn.Linear(width, 6 * width)

    def forward(self, h, sc):  # h (B, T, D), sc = silu(cond) (B, D)
        D = h.shape[-1]
        shift1, scale1, gate1, shift2, scale2, gate2 = self.ada(sc).chunk(6, dim=-1)
        h = h + gate1[:, None] * self.attn(modulate(F.layer_norm(h, (D,), eps=1e-6), shift1, scale1))
        return h + gate2[:, None] * self.mlp(modulate(F.layer_norm(h, (D,), eps=1e-6), shift2, scale2))


class Dit(nn.Module):
    """DiT with adaLN-Zero blocks, trained by flow matching (x_t = x0 + t (eps - x0))."""

    def __init__(self, image_size, channels, patch, width, depth, heads, mlp_ratio, num_classes):
        super().__init__()
        self.channels, self.patch, self.grid = channels, patch, image_size // patch
        self.patch_embed = nn.Linear(channels * patch * patch, width)
        self.t_fc1, self.t_fc2 = nn.Linear(256, width), nn.Linear(width, width)
        self.y_embed = nn.Embedding(num_classes + 1, width)  # the last class: no label (CFG)
        self.blocks = nn.ModuleList(DitBlock(width, heads, int(width * mlp_ratio)) for _ in range(depth))
        self.final_ada = nn.Linear(width, 2 * width)
        self.final_linear = nn.Linear(width, patch * patch * channels)
        self.register_buffer("pos", sincos_pos_embed_2d(width, self.grid), persistent=False)

    def velocity(self, x, t, y):  # x (B, C, S, S), t (B), y (B) -> (B, C, S, S)
        B, C, p, g = x.shape[0], self.channels, self.patch, self.grid
        patches = x.reshape(B, C, g, p, g, p).permute(0, 2, 4, 1, 3, 5).reshape(B, g * g, C * p * p)
        h = self.patch_embed(patches) + self.pos  # (B, T, D)
        cond = self.t_fc2(F.silu(self.t_fc1(timestep_embedding(t * 1000.0, 256)))) + self.y_embed(y)
        sc = F.silu(cond)  # (B, D)
        for block in self.blocks:
            h = block(h, sc)
        shift, scale = self.final_ada(sc).chunk(2, dim=-1)
        out = self.final_linear(modulate(F.layer_norm(h, (h.shape[-1],), eps=1e-6), shift, scale))
        return out.reshape(B, g, g, p, p, C).permute(0, 5, 1, 3, 2, 4).reshape(B, C, g * p, g * p)

    def forward(self, x0, eps, t, y):
        target = eps - x0
        xt = x0 + t[:, None, None, None] * target
        return F.mse_loss(self.velocity(xt, t, y).float(), target)


def init_like_loom(model):
    """Weights drawn like Loom's (normal, std 0.02; zero biases; unit norm weights). Timing does
    not depend on the values, but a diverging run would be timed on NaNs."""
    for name, p in model.named_parameters():
        with torch.no_grad():
            if name.endswith(".bias"):
                p.zero_()
            elif p.dim() == 1:
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02)


def adamw(model, lr=1e-4):
    """Fused AdamW, decay 0.1 on Linear weights only (as Loom decays)."""
    decay = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    groups = [[p for p in model.parameters() if id(p) in decay], [p for p in model.parameters() if id(p) not in decay]]
    return torch.optim.AdamW([{"params": groups[0], "weight_decay": 0.1}, {"params": groups[1], "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
