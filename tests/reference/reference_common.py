"""Shared harness of the PyTorch references (tests/reference/<model>_reference.py).

A Loom driver (reference_driver.h) writes, per case directory: meta.json, weights.safetensors,
grads.safetensors, step_grads.safetensors, losses.npy, grad_norms.npy, final_weights.safetensors
and the batch (.npy). A model module gives this harness three things:

    expected_parameters(config) -> {name: (shape, weight_decay)}   Loom's parameters, from the
                                                    source, in registration order
    load_batch(case_dir, meta)  -> batch            whatever loss() needs (float64 tensors)
    loss(params, batch, config) -> scalar tensor    the model + objective, written in torch,
                                                    params = {Loom name: float64 tensor}

and run_cases() recomputes every case in float64 (Loom's f32 weights cast up) and checks:

    step-0 loss            |loom - ref| / |ref|                 <= 1e-5
    step-0 gradients       max|loom - ref| / max|ref|, per tensor <= 1e-4
    20 AdamW step losses   max over steps |loom - ref| / |ref|   <= 1e-3

training as Loom's trainers do: each step clips the global gradient norm to train.grad_clip
(torch.nn.utils.clip_grad_norm_; none when it is 0) and then steps torch.optim.AdamW with Loom's
hyper-parameters and weight-decay mask at the learning rate of train.schedule (written here
from its definition, optim/schedule.h). Also checked:

    the learning rates     Loom's per-step lr vs the schedule recomputed here  <= 1e-12 rel.
    gradient norms         the global norm Loom measured before each step's clipping: step 0
                           <= 1e-4, later steps <= 1e-3 (relative)
    step-0 clipped grads   the gradients Loom's first AdamW step used (after clipping) vs the
                           reference's, per tensor                           <= 1e-4

    the optimiser alone    torch's AdamW replayed from Loom's initial weights on the
                           gradients Loom's 20 steps used vs Loom's final weights, per tensor,
                           relative to the total update (an f32 rounding floor allowed) <= 1e-3
    the parameter list     names, shapes and weight-decay flags as the model module expects

The loss tolerances alone cannot see a weight-decay or beta2 bug (lr * wd = 1e-5 per step;
beta2 barely matters in 20 steps); the replay does. Nor can they see much of a clipping bug
(Adam divides each update by the gradient's size); the step-0 clipped gradients do. The final
weights of the two independent runs are compared too, for information only (so, for the same
reason, elements whose gradient is ~0 may differ by up to ~lr).

Only the Python standard library and torch are needed (safetensors and .npy are parsed here).
"""

import ast
import json
import math
import os
import struct
import sys

import torch

LOSS_TOL = 1e-5
GRAD_TOL = 1e-4
CURVE_TOL = 1e-3
UPDATE_TOL = 1e-3
LR_TOL = 1e-12

_ST_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "U8": torch.uint8,
}
_NPY_DTYPES = {"<f4": torch.float32, "<f8": torch.float64, "<i8": torch.int64, "<i4": torch.int32}


class MismatchError(Exception):
    pass


def read_safetensors(path):
    """{name: tensor} in header order (8-byte LE header size, JSON header, data buffer)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    data = raw[8 + n :]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = _ST_DTYPES[entry["dtype"]]
        begin, end = entry["data_offsets"]
        shape = list(entry["shape"])
        count = math.prod(shape)
        if end - begin != count * torch.empty((), dtype=dtype).element_size() or end > len(data):
            raise ValueError(f"{path}: tensor '{name}' has bad data_offsets {begin}..{end}")
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype) if count else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(shape)
    return out


def read_npy(path):
    """A C-order little-endian .npy (version 1-3) as a torch tensor."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:6] != b"\x93NUMPY":
        raise ValueError(f"{path}: not a .npy file")
    major = raw[6]
    if major == 1:
        (hlen,) = struct.unpack("<H", raw[8:10])
        start = 10
    else:
        (hlen,) = struct.unpack("<I", raw[8:12])
        start = 12
    header = ast.literal_eval(raw[start : start + hlen].decode("latin1"))
    if header["fortran_order"] or header["descr"] not in _NPY_DTYPES:
        raise ValueError(f"{path}: unsupported .npy header {header}")
    dtype = _NPY_DTYPES[header["descr"]]
    shape = list(header["shape"])
    body = raw[start + hlen :]
    t = torch.frombuffer(bytearray(body), dtype=dtype) if body else torch.empty(0, dtype=dtype)
    if t.numel() != math.prod(shape):
        raise ValueError(f"{path}: {t.numel()} values for shape {shape}")
    return t.reshape(shape)


def rel_err(loom, ref):
    """max |loom - ref| / max |ref| (0 when both are exactly zero, inf when only ref is)."""
    loom = loom.to(torch.float64)
    ref = ref.to(torch.float64)
    diff = (loom - ref).abs().max().item() if ref.numel() else 0.0
    scale = ref.abs().max().item() if ref.numel() else 0.0
    if scale == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / scale


def update_err(loom_final, w0, ref_final, steps):
    """How far Loom's f32 weights after `steps` updates are from the reference's replay of the
    same updates: max(|loom - ref| - steps ulp_f32(w), 0) / max|ref - w0|. Each f32 update
    rounds the weight (p * (1 - lr wd) is rounded, and so is 1 - lr wd itself); that floor is
    allowed, anything above it counts against the size of the update."""
    loom_final = loom_final.to(torch.float64)
    w32 = torch.maximum(w0.abs(), ref_final.abs()).to(torch.float32)
    ulp = (torch.nextafter(w32, torch.full_like(w32, math.inf)) - w32).to(torch.float64)
    excess = ((loom_final - ref_final).abs() - steps * ulp).clamp(min=0.0)
    if not excess.numel():
        return 0.0
    worst = excess.max().item()
    scale = (ref_final - w0).abs().max().item()
    if scale == 0.0:
        return 0.0 if worst == 0.0 else math.inf
    return worst / scale


def _check_parameters(meta, expected, case):
    got = {p["name"]: (list(p["shape"]), bool(p["weight_decay"])) for p in meta["parameters"]}
    want = {name: (list(shape), bool(decay)) for name, (shape, decay) in expected.items()}
    if got != want:
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        other = sorted(n for n in set(got) & set(want) if got[n] != want[n])
        raise MismatchError(
            f"[{case}] Loom's parameters differ from the reference model's: missing {missing}, "
            f"unexpected {extra}, other (shape, weight_decay) {[(n, got[n], want[n]) for n in other]}"
        )


def schedule_lr(train, step):
    """The learning rate of `step` (from 0), from the definition of optim::LrSchedule: linear
    warmup to lr over warmup_steps ((step + 1) / warmup_steps), then constant, or a half cosine
    from lr down to min_lr_ratio * lr over the remaining steps of the run (train.steps)."""
    sched = train.get("schedule", {"kind": "constant", "warmup_steps": 0})
    lr, warmup, total = train["lr"], sched["warmup_steps"], train["steps"]
    if step < warmup:
        return lr * (step + 1) / warmup
    if sched["kind"] == "constant":
        return lr
    if sched["kind"] == "cosine":
        floor = lr * sched["min_lr_ratio"]
        progress = min(1.0, (step - warmup) / max(total - warmup, 1))
        return floor + (lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"schedule kind '{sched['kind']}' is not implemented by the reference")


def _set_lr(opt, lr):
    for group in opt.param_groups:
        group["lr"] = lr


def _grad_norm(params):
    """The global L2 norm of the gradients present (float64)."""
    total = sum(float((p.grad.to(torch.float64) ** 2).sum()) for p in params if p.grad is not None)
    return math.sqrt(total)


def _adamw(params, meta):
    """torch.optim.AdamW over {name: tensor} with Loom's hyper-parameters and decay mask."""
    train = meta["train"]
    flags = {p["name"]: p["weight_decay"] for p in meta["parameters"]}
    decay = [t for n, t in params.items() if flags[n]]
    no_decay = [t for n, t in params.items() if not flags[n]]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": train["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=train["lr"],
        betas=(train["beta1"], train["beta2"]),
        eps=train["eps"],
    )


def run_case(case_dir, model, verbose=True):
    """Recomputes one case; returns (results dict, list of failure messages)."""
    with open(os.path.join(case_dir, "meta.json")) as f:
        meta = json.load(f)
    case = meta.get("case", os.path.basename(case_dir))
    config = meta["config"]
    _check_parameters(meta, model.expected_parameters(config), case)

    weights = read_safetensors(os.path.join(case_dir, "weights.safetensors"))
    loom_grads = read_safetensors(os.path.join(case_dir, "grads.safetensors"))
    loom_final = read_safetensors(os.path.join(case_dir, "final_weights.safetensors"))
    loom_losses = read_npy(os.path.join(case_dir, "losses.npy")).to(torch.float64)
    batch = model.load_batch(case_dir, meta)
    train = meta["train"]
    if train["optimizer"] != "adamw":
        raise ValueError(f"[{case}] unsupported optimizer {train['optimizer']}")

    order = [p["name"] for p in meta["parameters"]]
    failures = []
    steps = train["steps"]
    grad_clip = train.get("grad_clip", 0.0)
    lrs = [schedule_lr(train, step) for step in range(steps)]
    loom_lrs = train.get("lrs", [train["lr"]] * steps)
    if len(loom_lrs) != steps:
        raise MismatchError(f"[{case}] Loom wrote {len(loom_lrs)} learning rates for {steps} steps")
    for step in range(steps):
        if not abs(loom_lrs[step] - lrs[step]) <= LR_TOL * abs(lrs[step]):
            failures.append(f"[{case}] learning rate at step {step}: Loom {loom_lrs[step]!r} vs the "
                            f"schedule's {lrs[step]!r}")

    # The optimiser alone: torch's AdamW replayed from Loom's initial weights on the gradients
    # Loom's own steps used must end at Loom's final weights. Measured per tensor against the
    # total update (see update_err), so weight decay (lr * wd * w per step, far below the loss
    # tolerances) and the betas (which the losses barely see in 20 steps) are checked too.
    step_grads = read_safetensors(os.path.join(case_dir, "step_grads.safetensors"))
    w0 = {n: weights[n].to(torch.float64) for n in order}
    replay = {n: w0[n].clone().requires_grad_(True) for n in order}
    opt_replay = _adamw(replay, meta)
    for step in range(steps):
        for n in order:
            g = step_grads.get(f"{n}@{step}")
            replay[n].grad = None if g is None else g.to(torch.float64).clone()
        _set_lr(opt_replay, lrs[step])
        opt_replay.step()
    update_errs = {n: update_err(loom_final[n], w0[n], replay[n].detach(), steps) for n in order}
    worst_update = max(update_errs, key=lambda n: update_errs[n])
    for n in order:
        if not update_errs[n] <= UPDATE_TOL:
            failures.append(
                f"[{case}] AdamW replayed on Loom's gradients, update of '{n}': max|loom - ref| / "
                f"max|ref| = {update_errs[n]:.3g} > {UPDATE_TOL:g}"
            )

    # The training run: loss, backward, clip, AdamW at the schedule's lr.
    params = {n: w0[n].clone().requires_grad_(True) for n in order}
    opt = _adamw(params, meta)
    ref_losses, ref_norms = [], []
    grad_errs, grad_scale, clipped_errs = {}, {}, {}
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = model.loss(params, batch, config)
        ref_losses.append(loss.item())
        loss.backward()
        if step == 0:
            for n in order:
                g = params[n].grad if params[n].grad is not None else torch.zeros_like(params[n])
                grad_errs[n] = rel_err(loom_grads[n], g)
                grad_scale[n] = g.abs().max().item() if g.numel() else 0.0
        ref_norms.append(_grad_norm(params.values()))
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(list(params.values()), grad_clip)
        if step == 0:  # what the first update used, after clipping
            for n in order:
                g = params[n].grad if params[n].grad is not None else torch.zeros_like(params[n])
                loom_g = step_grads.get(f"{n}@0", torch.zeros_like(loom_grads[n]))
                clipped_errs[n] = rel_err(loom_g, g)
        _set_lr(opt, lrs[step])
        opt.step()

    ref_losses = torch.tensor(ref_losses, dtype=torch.float64)
    if loom_losses.shape != ref_losses.shape:
        raise MismatchError(f"[{case}] Loom wrote {loom_losses.numel()} losses, expected {ref_losses.numel()}")
    loss0_err = abs(loom_losses[0].item() - ref_losses[0].item()) / abs(ref_losses[0].item())
    curve_errs = ((loom_losses - ref_losses).abs() / ref_losses.abs()).tolist()
    worst_grad = max(grad_errs, key=lambda n: grad_errs[n])
    worst_clipped = max(clipped_errs, key=lambda n: clipped_errs[n])
    loom_norms = read_npy(os.path.join(case_dir, "grad_norms.npy")).to(torch.float64)
    ref_norms = torch.tensor(ref_norms, dtype=torch.float64)
    if loom_norms.shape != ref_norms.shape:
        raise MismatchError(f"[{case}] Loom wrote {loom_norms.numel()} gradient norms, expected {ref_norms.numel()}")
    norm_errs = [rel_err(loom_norms[i : i + 1], ref_norms[i : i + 1]) for i in range(steps)]
    clipped_steps = sum(1 for x in ref_norms.tolist() if grad_clip > 0 and x > grad_clip)
    final_errs = {n: rel_err(loom_final[n], params[n].detach()) for n in order}
    worst_final = max(final_errs, key=lambda n: final_errs[n])

    if not loss0_err <= LOSS_TOL:
        failures.append(
            f"[{case}] step-0 loss: Loom {loom_losses[0].item():.9g} vs reference {ref_losses[0].item():.9g} "
            f"(relative error {loss0_err:.3g} > {LOSS_TOL:g})"
        )
    for n in order:
        if not grad_errs[n] <= GRAD_TOL:
            failures.append(
                f"[{case}] gradient of '{n}': max|loom - ref| / max|ref| = {grad_errs[n]:.3g} > {GRAD_TOL:g} "
                f"(max|ref| = {grad_scale[n]:.3g})"
            )
    for n in order:
        if not clipped_errs[n] <= GRAD_TOL:
            failures.append(
                f"[{case}] gradient of '{n}' used by the first AdamW step (after clipping to "
                f"{grad_clip:g}): max|loom - ref| / max|ref| = {clipped_errs[n]:.3g} > {GRAD_TOL:g}"
            )
    for step, e in enumerate(norm_errs):
        tol = GRAD_TOL if step == 0 else CURVE_TOL
        if not e <= tol:
            failures.append(
                f"[{case}] gradient norm at step {step}: Loom {loom_norms[step].item():.9g} vs reference "
                f"{ref_norms[step].item():.9g} (relative error {e:.3g} > {tol:g})"
            )
    for step, e in enumerate(curve_errs):
        if not e <= CURVE_TOL:
            failures.append(
                f"[{case}] loss at step {step}: Loom {loom_losses[step].item():.9g} vs reference "
                f"{ref_losses[step].item():.9g} (relative error {e:.3g} > {CURVE_TOL:g})"
            )

    if verbose:
        zero = sum(1 for n in order if loom_grads[n].abs().max().item() == 0.0)
        print(f"case {case}: {len(order)} parameters ({sum(1 for p in meta['parameters'] if p['weight_decay'])} with weight decay), "
              f"{zero} with an all-zero step-0 gradient")
        if grad_clip > 0:
            print(f"  gradient norm clipped to {grad_clip:g} at {clipped_steps} of {steps} steps")
        print(f"  {'step':>4}  {'lr':>9}  {'loom loss':>14}  {'reference loss':>16}  {'rel err':>9}"
              f"  {'grad norm':>10}  {'rel err':>9}")
        for step in range(len(curve_errs)):
            if step < 3 or step == len(curve_errs) - 1 or step % 5 == 4:
                print(f"  {step:>4}  {lrs[step]:>9.3g}  {loom_losses[step].item():>14.9f}  {ref_losses[step].item():>16.9f}"
                      f"  {curve_errs[step]:>9.2e}  {ref_norms[step].item():>10.4g}  {norm_errs[step]:>9.2e}")
        print(f"  {'check':<34} {'max rel err':>11}  {'tol':>7}")
        print(f"  {'step-0 loss':<34} {loss0_err:>11.2e}  {LOSS_TOL:>7.0e}")
        print(f"  {'step-0 gradients (worst tensor)':<34} {grad_errs[worst_grad]:>11.2e}  {GRAD_TOL:>7.0e}   {worst_grad}")
        print(f"  {'step-0 clipped gradients':<34} {clipped_errs[worst_clipped]:>11.2e}  {GRAD_TOL:>7.0e}   {worst_clipped}")
        print(f"  {'step-0 gradient norm':<34} {norm_errs[0]:>11.2e}  {GRAD_TOL:>7.0e}")
        print(f"  {'gradient norms, all steps':<34} {max(norm_errs):>11.2e}  {CURVE_TOL:>7.0e}")
        print(f"  {'loss over %d AdamW steps' % len(curve_errs):<34} {max(curve_errs):>11.2e}  {CURVE_TOL:>7.0e}")
        print(f"  {'AdamW replay on Loom gradients':<34} {update_errs[worst_update]:>11.2e}  {UPDATE_TOL:>7.0e}   {worst_update}")
        print(f"  {'final weights (information only)':<34} {final_errs[worst_final]:>11.2e}  {'-':>7}   {worst_final}")
    results = {
        "case": case,
        "loss0": loss0_err,
        "grad": grad_errs[worst_grad],
        "grad_name": worst_grad,
        "curve": max(curve_errs),
        "clipped": clipped_errs[worst_clipped],
        "norms": max(norm_errs),
        "final": final_errs[worst_final],
        "update": update_errs[worst_update],
    }
    return results, failures


def run_cases(out_dir, model):
    """Entry point of a <model>_reference.py: checks every case listed in OUT_DIR/cases.json.
    Exit status 0 when all pass, 1 on any mismatch, 2 when the inputs are missing or bad."""
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    try:
        with open(os.path.join(out_dir, "cases.json")) as f:
            cases = json.load(f)["cases"]
        if not cases:
            raise ValueError("no cases listed")
    except (OSError, ValueError, KeyError) as e:
        print(f"FAIL: cannot read the cases Loom's driver wrote in {out_dir}: {e}", file=sys.stderr)
        return 2
    failures = []
    for case in cases:
        try:
            _, f = run_case(os.path.join(out_dir, case), model)
            failures += f
        except MismatchError as e:
            failures.append(str(e))
        except (OSError, ValueError, KeyError) as e:
            print(f"FAIL: bad reference inputs for case '{case}' in {out_dir}: {e!r}", file=sys.stderr)
            return 2
    if failures:
        print(f"FAIL: Loom and the PyTorch reference disagree ({len(failures)} mismatches):", file=sys.stderr)
        for msg in failures:
            print("  " + msg, file=sys.stderr)
        return 1
    print(f"OK: Loom matches the float64 PyTorch reference in all {len(cases)} cases")
    return 0
