// Muon's orthogonalisation (Jordan et al. 2024): the nearest semi-orthogonal matrix to an
// update, approximated by a quintic Newton-Schulz iteration in plain matmuls (any backend).
#pragma once
#include "loom/core/tensor.h"

namespace loom::optim {

// U V^T of g = U S V^T, approximately (singular values brought into about [0.7, 1.2] by
// `steps` iterations of Jordan's coefficients 3.4445, -4.7750, 2.0315), for a 2-D f32 g; the
// iteration runs on the wide orientation (rows <= columns) of g scaled to Frobenius norm 1.
Tensor newton_schulz_orthogonalize(const Tensor& g, int steps);

// Which parameters Muon updates: the 2-D weights of the Linear layers inside the model's blocks
// ("blocks.3.attn.qkv.weight"); embeddings, heads, norms, biases, convolution filters and
// everything outside the blocks stay with AdamW.
bool muon_updates(const std::string& name, const Shape& shape);

}  // namespace loom::optim
