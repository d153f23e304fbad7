#include "loom/train/config_keys.h"

#include <algorithm>
#include <set>
#include <sstream>

namespace loom::train {

namespace {

constexpr const char* kDit = "dit";
constexpr const char* kGpt = "gpt";
constexpr const char* kDitGpt = "dit gpt";
constexpr const char* kMmdit = "mmdit";
constexpr const char* kAutoencoder = "autoencoder";
constexpr const char* kCanvasKinds = "mmdit autoencoder gpt";  // canvases (gpt: their captions)
constexpr const char* kDiffusion = "dit mmdit";                // the diffusion models' shared keys
constexpr const char* kVit = "vit_classifier dit_router";
constexpr const char* kDitVit = "dit vit_classifier dit_router";
constexpr const char* kMoe = "moe.experts > 0";
constexpr const char* kDiloco = "lowcomm.method = \"diloco\"";

// In the order read_config reads them, section by section.
const std::vector<ConfigKey> kKeys = {
    // [run]
    {"run.name", "", "string", "\"run\"", "", "",
     "the run directory's name under run.out_dir (one directory name)"},
    {"run.out_dir", "", "string", "\"runs\"", "", "", "where run directories are made"},
    {"run.seed", "", "integer", "0", "", "", "seed of the initial weights, data order and noise"},
    {"run.memory_limit_mb", "", "number", "0.0", ">= 0", "",
     "each process's live tensors may not exceed this (0: no limit)"},
    {"run.device_memory_limit_mb", "", "number", "0.0", ">= 0", "train.device = \"cuda\"",
     "each process's live tensors on its GPU may not exceed this (0: the GPU's memory)"},
    {"run.profile_steps", "", "string", "\"\"", "\"A:B\" or \"\"", "",
     "trace steps A..B as a Chrome trace in the run directory (\"\": no profile)"},
    {"run.tensorboard", "", "boolean", "true", "", "",
     "the main rank's metrics also as TensorBoard scalars (run_dir/tensorboard)"},
    {"run.id", "", "string", "\"\"", "", "",
     "the run's identity, kept by its resumes (\"\": a new run gets one)"},
    {"run.threads", "", "integer", "0", "0 to 4096", "",
     "threads of the CPU kernels (0: OMP_NUM_THREADS, else the cores this process may use, "
     "shared by the ranks on its host)"},
    // [model]
    {"model.kind", "", "string", "\"dit\"",
     "dit, gpt, vit_classifier, dit_router, mmdit, autoencoder", "",
     "what is trained: a diffusion transformer, a language model, the Fashion-MNIST "
     "classifier, the router of decentralized diffusion experts, a text-to-image MMDiT, or the "
     "KL autoencoder of latent diffusion"},
    {"model.image_size", kDitVit, "integer", "28", "", "", "image height and width in pixels"},
    {"model.image_size", kCanvasKinds, "integer", "64", "", "", "image height and width in pixels"},
    {"model.channels", "dit mmdit vit_classifier dit_router autoencoder", "integer", "1", "", "",
     "image channels"},
    {"model.patch", kDit, "integer", "2", "divides image_size", "",
     "patch size: the image is (image_size / patch)^2 tokens"},
    {"model.patch", "mmdit vit_classifier dit_router", "integer", "4", "divides image_size", "",
     "patch size: the image is (image_size / patch)^2 tokens"},
    {"model.width", kDiffusion, "integer", "256", "multiple of heads", "", "transformer width"},
    {"model.width", kGpt, "integer", "384", "multiple of heads", "", "transformer width"},
    {"model.width", kVit, "integer", "96", "multiple of heads", "", "transformer width"},
    {"model.width", kAutoencoder, "integer", "32", "> 0", "",
     "convolution channels at the first level, doubled at each further one"},
    {"model.depth", "dit gpt mmdit", "integer", "6", "", "", "transformer blocks"},
    {"model.depth", kVit, "integer", "4", "", "", "transformer blocks"},
    {"model.heads", kDiffusion, "integer", "4", "", "", "attention heads"},
    {"model.heads", kGpt, "integer", "6", "", "", "attention heads"},
    {"model.heads", kVit, "integer", "4", "", "", "attention heads"},
    {"model.mlp_ratio", "dit gpt mmdit", "number", "4.0", "", "", "MLP hidden width / model width"},
    {"model.mlp_ratio", kVit, "number", "2.0", "", "", "MLP hidden width / model width"},
    {"model.num_classes", kDitVit, "integer", "10", "", "",
     "classes (dit: the labels it is conditioned on; classifier: its outputs)"},
    {"model.stem_channels", kVit, "integer", "0", "", "",
     "channels of a two-convolution stem before the patch embedding (0: none)"},
    {"model.labels", "dit_router", "integer", "0", ">= 0", "",
     "classes the router is told (the class being sampled; 0: unconditional)"},
    {"model.text_length", kMmdit, "integer", "40", "> 0; words: >= 35", "",
     "caption tokens (padded; the longest canvas caption is 35 words); every training caption "
     "must fit"},
    {"model.text_depth", kMmdit, "integer", "2", ">= 0", "",
     "blocks of the caption encoder trained with the model"},
    {"model.conditioning", kMmdit, "string", "\"joint\"", "joint, cross", "",
     "joint: MMDiT's joint attention over caption and image tokens; cross: PixArt's "
     "cross-attention from the image to the caption"},
    {"model.latent", kDit, "string", "\"\"", "", "",
     "a trained autoencoder's run directory (trained on Fashion-MNIST): train on its latents of "
     "the images (encoded once into a cache beside it; model.channels and image_size must be the "
     "latent's) and decode samples with it (\"\": pixels)"},
    {"model.latent", kMmdit, "string", "\"\"", "", "",
     "a trained autoencoder's run directory: train on its latents of the canvases (encoded once "
     "into a cache beside it; model.channels and image_size must be the latent's) and decode "
     "samples with it (\"\": pixels)"},
    {"model.text_encoder", kMmdit, "string", "\"\"", "", "",
     "a GPT trained on the captions (its run directory: the latest checkpoint, recorded; or a "
     "checkpoint): the text encoder reads its frozen features of each caption, through its "
     "tokenizer (\"\": the encoder embeds tokens of data.tokenizer)"},
    {"model.vocab_size", kMmdit, "integer", "512", "> 256", "data.tokenizer = \"bpe\"",
     "tokens of the BPE learned from the training captions (the 256 bytes included; it stops "
     "early when no pair repeats)"},
    {"model.downsamples", kAutoencoder, "integer", "2", "1 to 6", "",
     "levels, each halving the side: latents image_size / 2^downsamples wide"},
    {"model.latent_channels", kAutoencoder, "integer", "4", "> 0", "", "channels of a latent"},
    {"model.style", kGpt, "string", "\"gpt2\"", "gpt2, llama", "",
     "gpt2: LayerNorm, GELU, learned positions; llama: RMSNorm, SwiGLU, rotary positions"},
    {"model.vocab_size", kGpt, "integer", "256", "", "", "tokens of the tokenizer"},
    {"model.context", kGpt, "integer", "256", "", "", "tokens per training sequence"},
    {"model.kv_heads", kGpt, "integer", "0", "divides heads", "",
     "key/value heads, grouped-query attention (0: as many as heads)"},
    {"model.rope_theta", kGpt, "number", "10000.0", "", "", "rotary position base (llama)"},
    {"model.rope_scaling_factor", kGpt, "number", "1.0", ">= 1", "",
     "RoPE scaling: Llama 3.x's low frequencies, or every one (linear), turn this many times "
     "slower (1: none; llama)"},
    {"model.rope_scaling_type", kGpt, "string", "\"llama3\"", "llama3, linear", "",
     "RoPE scaling by rope_scaling_factor: Llama 3.x's (the frequency bands below) or linear "
     "(position interpolation: every frequency divided)"},
    {"model.rope_low_freq_factor", kGpt, "number", "1.0", "> 0", "",
     "Llama 3.x's RoPE scaling: wavelengths above original context / this are scaled"},
    {"model.rope_high_freq_factor", kGpt, "number", "4.0", "> low", "",
     "Llama 3.x's RoPE scaling: wavelengths below original context / this are kept"},
    {"model.rope_original_context", kGpt, "number", "8192.0", "> 0", "",
     "Llama 3.x's RoPE scaling: the context the frequencies were first trained at"},
    {"model.tie_embeddings", kGpt, "boolean", "(true for gpt2, false for llama)", "", "",
     "the output head shares the token embedding"},
    {"model.swiglu_hidden", kGpt, "integer", "0", "", "",
     "SwiGLU hidden width (llama only; 0: 8/3 x width rounded up to a multiple of 64)"},
    {"model.qkv_bias", kGpt, "boolean", "false", "", "",
     "biases on the attention's q, k, v projections (llama only: Qwen2's layout)"},
    {"model.sliding_window", kGpt, "integer", "0", ">= 0", "",
     "sliding-window attention (Mistral's): each token attends to itself and the window - 1 "
     "before it, in training (also under context parallelism) and decoding; 0: the whole "
     "context"},
    {"model.mla_kv_rank", kGpt, "integer", "0", ">= 0", "",
     "multi-head latent attention (DeepSeek-V2; llama style) in place of attention: keys and "
     "values from a latent of this many values a token, decoding caches only it and the shared "
     "RoPE key; 0: ordinary attention"},
    {"model.mla_q_rank", kGpt, "integer", "0", ">= 0", "",
     "latent attention: queries through a latent of this size (0: straight from the input)"},
    {"model.mla_rope_dim", kGpt, "integer", "0", "even", "",
     "latent attention: each head's rotated part of q and k (0: head_dim / 2; the non-rotated "
     "part and the values are head_dim each)"},
    {"model.norm_eps", kGpt, "number", "0.0", ">= 0", "",
     "the norms' epsilon (0: the style's, 1e-5 for gpt2's LayerNorm, 1e-6 for llama's RMSNorm)"},
    {"model.mixers", kGpt, "string", "\"A\"", "A and M", "",
     "the blocks' sequence mixers, repeated over the depth: A attention, M Mamba-2 (\"MMMA\": "
     "one attention block in four); every block keeps its MLP"},
    {"model.ssm_state", kGpt, "integer", "64", "> 0", "model.mixers with M",
     "Mamba-2: state size N per head"},
    {"model.ssm_head_dim", kGpt, "integer", "64", "divides ssm_expand x width",
     "model.mixers with M", "Mamba-2: channels P per head"},
    {"model.ssm_expand", kGpt, "integer", "2", "> 0", "model.mixers with M",
     "Mamba-2: inner width = ssm_expand x width"},
    {"model.ssm_groups", kGpt, "integer", "1", "divides the heads", "model.mixers with M",
     "Mamba-2: groups of heads sharing B and C"},
    {"model.ssm_conv", kGpt, "integer", "4", ">= 2", "model.mixers with M",
     "Mamba-2: the causal depthwise convolution's width"},
    {"model.ssm_chunk", kGpt, "integer", "64", "> 0", "model.mixers with M",
     "Mamba-2: the chunk length of the SSD scan (cost linear in the sequence); the kernel's "
     "checkpoint interval"},
    {"model.ssm_scan", kGpt, "string", "\"chunked\"", "chunked, kernel", "model.mixers with M",
     "Mamba-2's scan: the chunked SSD form from GEMMs (faster on the CPU), or the backend's "
     "step-by-step kernel, which keeps only a state every ssm_chunk steps for the backward"},
    // [moe]
    {"moe.experts", kDitGpt, "integer", "0", "", "",
     "experts of a mixture in place of each MLP (0: a dense model)"},
    {"moe.top_k", kDitGpt, "integer", "2", "1 to experts", kMoe, "experts each token is routed to"},
    {"moe.gating", kDitGpt, "string", "\"softmax\"", "softmax, sigmoid", kMoe,
     "the router's scores"},
    {"moe.renormalize", kDitGpt, "boolean", "true", "", kMoe,
     "the top-k gates are renormalized to sum to 1"},
    {"moe.hidden", kDitGpt, "integer", "0", ">= 0", kMoe,
     "each expert's hidden width (0: the dense MLP's)"},
    {"moe.shared_experts", kDitGpt, "integer", "0", "", kMoe,
     "experts every token goes through besides its routed ones"},
    {"moe.aux_loss", kDitGpt, "number", "0.01", "", kMoe, "weight of the load-balancing loss"},
    {"moe.z_loss", kDitGpt, "number", "0.001", "", kMoe, "weight of the router z-loss"},
    {"moe.bias_rate", kDitGpt, "number", "0.0", "", kMoe,
     "rate of the auxiliary-loss-free balancing bias (0: off)"},
    {"moe.every", kDitGpt, "integer", "1", "1 to depth", kMoe,
     "every N-th block has the mixture, the others a dense MLP"},
    // [data]
    {"data.dataset", kDit, "string", "\"fashion_mnist\"", "fashion_mnist, images", "",
     "the training images: Fashion-MNIST, or PNG files (data.path)"},
    {"data.dataset", kGpt, "string", "\"kjv\"", "kjv, text, tokens, canvas", "",
     "the training text: the King James Bible, a UTF-8 file, `loom data prepare` shards, or the "
     "training canvases' captions, one a line (a caption encoder for the MMDiT)"},
    {"data.dataset", kMmdit, "string", "\"canvas\"", "canvas", "",
     "captioned canvases of Fashion-MNIST items (docs/text_to_image.md)"},
    {"data.dataset", kAutoencoder, "string", "\"canvas\"", "canvas, fashion_mnist", "",
     "the images of the captioned canvases (docs/text_to_image.md), or Fashion-MNIST's (28 x 28: "
     "the DiT's latents)"},
    {"data.path", "dit mmdit vit_classifier dit_router autoencoder", "string",
     "\"/usr/share/datasets/fashion-mnist\"", "", "",
     "Fashion-MNIST's directory, or (dataset images) a folder with labels.txt, a .tar shard or "
     "a directory of shards"},
    {"data.path", kGpt, "string", "(\"\"; dataset canvas: Fashion-MNIST's directory)", "", "",
     "the text file (dataset text), the directory of `loom data prepare` (dataset tokens) or "
     "Fashion-MNIST's (dataset canvas)"},
    {"data.val_path", kDit, "string", "\"\"", "", "data.dataset = \"images\"",
     "held-out PNG images, as data.path (\"\": none)"},
    {"data.clusters", kDit, "string", "\"\"", "", "",
     "assignments of `loom cluster`: train a decentralized expert on one cluster"},
    {"data.clusters", "dit_router", "string", "\"\"", "required", "",
     "assignments of `loom cluster` the router learns to predict"},
    {"data.cluster", kDit, "integer", "-1", ">= 0", "data.clusters set",
     "the cluster this expert trains on"},
    {"data.canvases", kCanvasKinds, "integer", "60000", "> 0", "data.dataset = \"canvas\"",
     "training canvases (canvas i drawn from (canvas_seed, i) as the sampler picks it)"},
    {"data.captions", kMmdit, "string", "\"full\"", "full, classes", "",
     "what the model is told of a canvas: its caption, or its items' classes alone in class "
     "order (the class-label baseline)"},
    {"data.canvas_seed", kCanvasKinds, "integer", "0", ">= 0", "",
     "the canvases' seed (training and held-out alike)"},
    {"data.paths", kGpt, "string list", "([data.path])", "", "data.dataset = \"tokens\"",
     "several directories of `loom data prepare`, mixed"},
    {"data.weights", kGpt, "number list", "(1.0 for each path)", "> 0, one per path",
     "data.dataset = \"tokens\"", "mixing weights of data.paths"},
    {"data.val_fraction", kGpt, "number", "0.05", "(0, 1)", "", "the held-out tail of the text"},
    {"data.tokenizer", kGpt, "string", "\"bytes\"", "", "",
     "bytes; bpe (a BPE of at most model.vocab_size tokens learned from the training text by the "
     "run, kept in its directory); a file of `loom tokenizer train`, a Hugging Face "
     "tokenizer.json (or its directory) or a .tiktoken file"},
    {"data.tokenizer", kMmdit, "string", "\"words\"", "words, bpe", "model.text_encoder unset",
     "how captions become tokens: the caption grammar's closed vocabulary, or a byte-level BPE "
     "learned from the training captions (kept in the run directory)"},
    {"data.tokenizer_pattern", kGpt, "string", "\"gpt2\"", "gpt2, cl100k, o200k", "",
     "the pre-tokenizer pattern of a .tiktoken tokenizer"},
    {"data.cache_dir", kGpt, "string", "\"\"", "", "",
     "where dataset kjv puts kjv.txt (\"\": $XDG_CACHE_HOME/loom, else ~/.cache/loom)"},
    // [train]
    {"train.steps", "", "integer", "1000", "> 0", "",
     "optimizer steps (with max_minutes, the ceiling)"},
    {"train.batch_size", "", "integer", "64", "> 0, divisible by the data-parallel ranks", "",
     "global batch of one micro-batch (samples or sequences)"},
    {"train.grad_accum", "", "integer", "1", "1 to 65536", "",
     "micro-batches per step (pipeline parallelism: its micro-batches)"},
    {"train.log_every", "", "integer", "10", "> 0", "", "steps between progress lines"},
    {"train.ckpt_every", "", "integer", "0", ">= 0", "",
     "steps between checkpoints (0: only at the end)"},
    {"train.keep_checkpoints", "", "integer", "2", "> 0", "", "checkpoints kept, newest first"},
    {"train.async_checkpoint", "", "boolean", "false", "", "",
     "write checkpoints on a background thread from a snapshot"},
    {"train.max_minutes", "", "number", "0.0", ">= 0", "",
     "time budget: stop and checkpoint when it is spent (0: none); optim.schedule wsd times "
     "its decay to it"},
    {"train.stop_after", "", "integer", "0", ">= 0", "",
     "stop and checkpoint once this global step is done (0: at train.steps)"},
    {"train.grad_clip", "", "number", "1.0", "", "", "global gradient norm clip (<= 0: none)"},
    {"train.precision", "", "string", "\"f32\"",
     "auto, f32, bf16, fp8_tensorwise, fp8_delayed, fp8_blockwise, mxfp8, nvfp4", "",
     "matmul precision (auto: bf16 where the GPU or CPU multiplies it natively, else f32); f32 "
     "master weights and optimizer state always"},
    {"train.device", "", "string", "\"cpu\"", "cpu, cuda", "", "where the model trains"},
    {"train.tf32", "", "boolean", "false", "", "",
     "f32 GEMMs on TF32 tensor cores (train.device cuda only)"},
    {"train.init_from", kGpt, "string", "\"\"", "", "",
     "a Hugging Face model directory to start from (\"\": random weights)"},
    {"train.ema_decay", kDiffusion, "number", "0.999", "[0, 1)", "",
     "decay of the weights' exponential moving average that is sampled"},
    {"train.ema_start", kDiffusion, "integer", "0", ">= 0", "",
     "steps before the average starts tracking (it copies the weights until then)"},
    {"train.augment", "vit_classifier", "boolean", "true", "", "",
     "random flips and shifts by up to 2 pixels"},
    {"train.kl_weight", kAutoencoder, "number", "0.0001", ">= 0", "",
     "weight of the KL divergence from N(0, 1), per latent value, against the reconstruction "
     "error per pixel"},
    {"train.reconstruction", kAutoencoder, "string", "\"l2\"", "l2, l1", "",
     "the reconstruction error: squared or absolute"},
    // [precision]
    {"precision.amax_history", "", "integer", "16", ">= 1", "train.precision = \"fp8_delayed\"",
     "steps of amax history a delayed scale is taken from"},
    {"precision.block_size", "", "integer", "128", "16 to 1024, a power of two",
     "train.precision = \"fp8_blockwise\"", "values per scale"},
    {"precision.hadamard", "", "boolean", "true", "", "train.precision = \"nvfp4\"",
     "a random Hadamard transform before quantising the weight gradient's operands"},
    {"precision.stochastic_rounding", "", "boolean", "true", "", "train.precision = \"nvfp4\"",
     "gradients rounded stochastically to FP4"},
    {"precision.bf16_blocks", "", "integer list", "([0, -1] for nvfp4, else [])",
     "-depth to depth - 1", "a low-precision recipe",
     "blocks kept in bf16 (negative: from the last)"},
    // [diffusion]
    {"diffusion.label_dropout", kDiffusion, "number", "0.1", "[0, 1]", "",
     "labels (mmdit: whole captions) dropped to \"no label\" so guidance has an unconditional "
     "model"},
    {"diffusion.label_dropout", "dit_router", "number", "0.1", "[0, 1]", "model.labels > 0",
     "labels dropped to \"no label\", as the experts drop theirs"},
    {"diffusion.timesteps", kDiffusion, "string", "\"logit_normal\"", "logit_normal, uniform", "",
     "the training times' distribution"},
    {"diffusion.logit_normal_mean", "dit mmdit dit_router", "number", "0.0", "", "",
     "mean of the logit-normal times"},
    {"diffusion.logit_normal_std", "dit mmdit dit_router", "number", "1.0", "> 0", "",
     "deviation of the logit-normal times"},
    {"diffusion.shift", "dit mmdit dit_router", "number", "1.0", "> 0", "",
     "timestep shift (SD3): every time t, drawn for training and on the sampler's grid, becomes "
     "s t / (1 + (s - 1) t); above 1 more of both near the noise end (larger images)"},
    // [sample]
    {"sample.steps", kDiffusion, "integer", "50", "1 to 10000", "",
     "sampler steps of the end-of-run grid and evaluation"},
    {"sample.cfg_scale", kDiffusion, "number", "2.0", "", "", "classifier-free guidance scale"},
    {"sample.heun", kDiffusion, "boolean", "false", "", "",
     "Heun's second-order sampler (else Euler)"},
    {"sample.per_class", kDit, "integer", "10", "1 to 10000", "", "samples per class in the grid"},
    {"sample.per_class", kMmdit, "integer", "10", "1 to 10000", "",
     "samples of each of the grid's 8 held-out captions"},
    {"sample.every", kDiffusion, "integer", "0", ">= 0", "",
     "also a grid every N steps (0: at the end only)"},
    {"sample.prompt", kGpt, "string", "\"\"", "", "",
     "text continued at the end of training (\"\": after a newline)"},
    {"sample.tokens", kGpt, "integer", "0", "0 to 1000000", "",
     "tokens sampled at the end of training (0: none)"},
    {"sample.temperature", kGpt, "number", "0.8", ">= 0", "", "sampling temperature (0: greedy)"},
    // [eval]
    {"eval.classifier", kDiffusion, "string", "\"\"", "", "",
     "checkpoint of the Fashion-MNIST classifier that judges samples (\"\": none; relative: "
     "the working directory, else Loom's installation)"},
    {"eval.num_samples", kDit, "integer", "1000", "1 to 1000000", "",
     "samples judged at the end (accuracy and FID)"},
    {"eval.num_samples", kMmdit, "integer", "1000", "1 to 1000000", "",
     "held-out captions sampled and judged at the end (the canvas judge and FID)"},
    {"eval.every", kDiffusion, "integer", "0", ">= 0", "",
     "steps between held-out loss evaluations (0: at the end only)"},
    {"eval.every", kGpt, "integer", "100", ">= 0", "",
     "steps between held-out loss evaluations (0: at the end only)"},
    {"eval.val_images", kDiffusion, "integer", "1000", ">= 0", "",
     "test images (mmdit: canvases) of the held-out loss (0: none)"},
    {"eval.every", kAutoencoder, "integer", "0", ">= 0", "",
     "steps between held-out PSNR evaluations (0: at the end only)"},
    {"eval.val_images", kAutoencoder, "integer", "1000", ">= 0", "",
     "test canvases of the held-out PSNR (0: none)"},
    {"eval.windows", kGpt, "integer", "64", "1 to 1000000", "",
     "validation windows of the periodic held-out loss"},
    // [dpo]
    {"dpo.reference", kMmdit, "string", "\"\"", "", "",
     "a trained MMDiT's checkpoint directory (or run directory: its latest): post-train it by "
     "Diffusion-DPO, its EMA weights the "
     "frozen reference and the starting point (\"\": train by flow matching)"},
    {"dpo.pairs", kMmdit, "integer", "1000", "1 to 1000000", "dpo.reference set",
     "training captions the reference samples twice each; the canvas judge ranks each pair "
     "(places + sizes + classes right), ties dropped"},
    {"dpo.beta", kMmdit, "number", "1000.0", "> 0", "dpo.reference set",
     "scale of the margins (mean squared velocity errors against the reference's) in the loss"},
    // [optim]
    {"optim.lr", "", "number", "0.001", ">= 0", "", "peak learning rate (AdamW)"},
    {"optim.beta1", "", "number", "0.9", "[0, 1)", "", "AdamW's first-moment decay"},
    {"optim.beta2", "", "number", "0.999", "[0, 1)", "", "AdamW's second-moment decay"},
    {"optim.eps", "", "number", "1e-08", "> 0", "", "AdamW's epsilon"},
    {"optim.weight_decay", "", "number", "0.0", ">= 0", "", "decoupled weight decay"},
    {"optim.offload", "", "boolean", "false", "", "",
     "AdamW's state in host memory, updated there: the moments, and under ZeRO (on a GPU, or "
     "zero3) the f32 master too; zero3's update overlapped with the next forward "
     "(docs/parallelism.md)"},
    {"optim.name", "", "string", "\"adamw\"", "adamw, muon", "",
     "muon: Muon for the blocks' Linear weights (orthogonalised Nesterov momentum at AdamW's "
     "update RMS), AdamW for the rest"},
    {"optim.muon_momentum", "", "number", "0.95", "[0, 1)", "optim.name = \"muon\"",
     "Muon's momentum"},
    {"optim.muon_steps", "", "integer", "5", "1 to 100", "optim.name = \"muon\"",
     "Newton-Schulz iterations of Muon's orthogonalisation"},
    {"optim.schedule", "", "string", "\"cosine\"", "constant, cosine, wsd", "",
     "learning-rate schedule after warmup (wsd: warmup-stable-decay)"},
    {"optim.warmup_steps", "", "integer", "0", ">= 0", "", "linear warmup steps"},
    {"optim.min_lr_ratio", "", "number", "0.1", "[0, 1]", "",
     "the last learning rate / optim.lr (cosine, wsd)"},
    {"optim.decay_fraction", "", "number", "0.2", "[0, 1]", "",
     "wsd: the share of the run (of train.max_minutes, if set) spent decaying"},
    // [parallel] and [lowcomm]
    {"parallel.pp", "", "integer", "1", ">= 1", "", "pipeline-parallel stages"},
    {"lowcomm.method", "", "string", "\"none\"", "none, diloco", "",
     "DiLoCo: workers train apart and meet every inner_steps"},
    {"lowcomm.workers", kDitGpt, "integer", "0", ">= 1", kDiloco,
     "DiLoCo workers (the mesh's dp_replicate groups)"},
    {"lowcomm.inner_steps", kDitGpt, "integer", "50", ">= 1, divides train.steps", kDiloco,
     "steps between outer steps"},
    {"lowcomm.outer_lr", kDitGpt, "number", "0.7", "> 0", kDiloco, "outer optimizer's rate"},
    {"lowcomm.outer_momentum", kDitGpt, "number", "0.9", "[0, 1)", kDiloco,
     "outer optimizer's momentum"},
    {"lowcomm.nesterov", kDitGpt, "boolean", "true", "", kDiloco, "Nesterov outer momentum"},
    {"lowcomm.compression", kDitGpt, "string", "\"none\"", "none, int8, int4", kDiloco,
     "quantisation of the outer deltas on the wire"},
    {"lowcomm.block_size", kDitGpt, "integer", "128", ">= 1", kDiloco,
     "values per quantisation scale"},
    {"lowcomm.scale_dtype", kDitGpt, "string", "\"f32\"", "f32, bf16", kDiloco,
     "type of the quantisation scales"},
    {"lowcomm.error_feedback", kDitGpt, "boolean", "true", "", kDiloco,
     "the quantisation error is carried into the next round"},
    {"lowcomm.fragments", kDitGpt, "integer", "1", "divides inner_steps", kDiloco,
     "streaming DiLoCo: fragments of the model synchronised in turn"},
    {"lowcomm.overlap_steps", kDitGpt, "integer", "0", "[0, inner_steps / fragments)", kDiloco,
     "inner steps a fragment's exchange overlaps"},
    {"lowcomm.mixing", kDitGpt, "number", "0.0", "[0, 1)", kDiloco,
     "share of the local fragment kept when the outer result arrives late"},
    {"lowcomm.outer_state", kDitGpt, "string", "\"device\"", "device, host", kDiloco,
     "where the outer state lives: on the parameters' device, or in host memory"},
    {"parallel.dp_replicate", "", "integer", "(lowcomm.workers, else 1)", ">= 1", "",
     "replicated data-parallel groups (HSDP's replicas, DiLoCo's workers)"},
    {"parallel.dp_shard", "", "integer", "-1", "-1 or >= 1", "",
     "sharded data-parallel ranks (-1: the processes the other axes leave)"},
    {"parallel.cp", "", "integer", "1", ">= 1", "", "context-parallel ranks"},
    {"parallel.tp", "", "integer", "1", ">= 1", "", "tensor-parallel ranks"},
    {"parallel.data_parallel", "", "string", "\"ddp\"", "ddp, zero1, zero2, zero3, fsdp", "",
     "what data-parallel ranks shard (zero3 = fsdp: parameters too)"},
    {"parallel.gather_dtype", "", "string", "\"f32\"",
     "f32, bf16 (zero3; zero1/zero2 with optim.offload on cuda)", "",
     "type of ZeRO-3's parameter all-gathers; with ZeRO-1/2 offloaded from a GPU also the "
     "device's copy of the parameters between uses"},
    {"parallel.activation_checkpointing", "", "string", "\"none\"", "none, full, selective", "",
     "activations recomputed in the backward pass instead of kept"},
    {"parallel.sequence_parallel", "", "boolean", "false", "", "",
     "norms and residuals split over the tensor-parallel ranks by sequence"},
    {"parallel.context_parallel", "", "string", "\"ring\"", "ring, ulysses, usp", "",
     "how attention is split over the context-parallel ranks (usp: a ring of Ulysses groups)"},
    {"parallel.ulysses", "", "integer", "(none)", ">= 2, divides parallel.cp",
     "parallel.context_parallel usp",
     "USP's Ulysses degree: consecutive cp ranks trading sequence for heads; the ring's degree "
     "is cp / ulysses"},
    {"parallel.pipeline_schedule", "", "string", "\"1f1b\"", "gpipe, 1f1b, interleaved, zb-h1", "",
     "pipeline schedule"},
    {"parallel.pipeline_chunks", "", "integer", "1", ">= 1", "",
     "model chunks per stage (interleaved)"},
    {"parallel.bucket_mb", "", "number", "25.0", "> 0", "",
     "gradient all-reduce bucket size in MB"},
    {"dist.timeout_s", "", "number", "600.0", "> 0", "",
     "a collective older than this aborts the run (the hang watchdog)"},
    {"dist.device_group", "", "string", "\"auto\"", "auto, nccl, staged", "",
     "with train.device \"cuda\" and several processes: device tensors through NCCL (each "
     "process its own GPU), or staged through host memory over MPI (processes sharing a GPU); "
     "auto: NCCL where the build has it (config.toml records the choice)"},
    {"parallel.ep", "", "integer", "1", ">= 1, divides moe.experts", "",
     "expert-parallel ranks (carved from the data-parallel ones)"},
    // [resilience]
    {"resilience.max_skips_in_row", "", "integer", "3", "> 0", "",
     "bad steps skipped in a row before the run rolls back to its last checkpoint"},
    {"resilience.max_rollbacks", "", "integer", "2", ">= 0", "",
     "rollbacks before the run stops instead"},
    {"resilience.spike_rollback", "", "boolean", "false", "", "",
     "on a loss spike: skip it, roll back to the newest checkpoint and replay to it with the "
     "steps' own data, the spike's batch skipped"},
    {"resilience.skip_spikes", "", "boolean", "false", "", "",
     "treat a loss spike like a non-finite step"},
    {"resilience.straggler_every", "", "integer", "50", ">= 0", "",
     "steps between comparisons of the ranks' compute time (0: off)"},
    {"resilience.straggler_factor", "", "number", "1.5", "> 1", "",
     "a rank is a straggler above this times the median"},
    {"resilience.exclude_stragglers_after", "", "integer", "0", ">= 0", "",
     "a rank flagged as a straggler this many comparisons in a row is excluded: checkpoint, "
     "exit 76, and loom launch --min-ranks restarts without it (0: never)"},
    {"resilience.spike_zscore", "", "number", "6.0", ">= 0", "",
     "a loss this many deviations above the last 50 is a spike (0: off)"},
    {"resilience.consistency_every", "", "integer", "100", ">= 0", "",
     "steps between comparisons of the replicas' weight hashes (0: off)"},
    {"resilience.preempt_signals", "", "string", "\"TERM,INT,USR1\"", "signal names, or \"\"", "",
     "signals that checkpoint the run and exit 75"},
    {"resilience.memory_checkpoint_every", "", "integer", "0", ">= 0", "",
     "steps between in-memory checkpoints: each rank's state in its machine's memory and a "
     "copy at a buddy rank on another machine; a restart at the same layout restores from "
     "them, falling back to disk (0: off)"},
    {"resilience.memory_store", "", "string", "\"/dev/shm\"", "a directory", "",
     "where in-memory checkpoints are kept: a memory file system on every machine"},
};

std::string section_of(const std::string& name) {
  return name.substr(0, name.find('.'));
}

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  return kKeys;
}

std::vector<std::string> config_key_names() {
  std::vector<std::string> names;
  for (const ConfigKey& k : kKeys)
    if (std::find(names.begin(), names.end(), k.name) == names.end()) names.push_back(k.name);
  return names;
}

std::string config_keys_text(const std::string& section) {
  std::ostringstream os;
  std::string last_section;
  for (const ConfigKey& k : kKeys) {
    const std::string s = section_of(k.name);
    if (!section.empty() && s != section) continue;
    if (s != last_section) os << (last_section.empty() ? "" : "\n") << "[" << s << "]\n";
    last_section = s;
    os << "  " << k.name << " (" << k.type << ") = " << k.fallback;
    if (*k.kinds) os << "   model.kind " << k.kinds;
    os << "\n      " << k.meaning;
    if (*k.allowed) os << "\n      allowed: " << k.allowed;
    if (*k.when) os << "\n      read when " << k.when;
    os << "\n";
  }
  return os.str();
}

std::string config_keys_markdown() {
  std::ostringstream os;
  os << "# Config reference\n\n"
     << "Every key `loom train` reads, section by section: its type, its default, the values it\n"
     << "takes, the model kinds (`model.kind`) that read it and when. A key that no reader asks\n"
     << "for is an error naming it. The same table prints with `loom config keys [SECTION]`;\n"
     << "this page is generated from it (`loom config keys --markdown > docs/config.md`) and a\n"
     << "test fails when the two differ, or when the table and what the trainer reads differ.\n"
     << "A default in parentheses is computed from other keys. Values are TOML; `--set\n"
     << "section.key=value` overrides one key on the command line.\n";
  std::string last_section;
  for (const ConfigKey& k : kKeys) {
    const std::string s = section_of(k.name);
    if (s != last_section) {
      os << "\n## [" << s << "]\n\n"
         << "| key | type | default | allowed | read by | meaning |\n"
         << "|---|---|---|---|---|---|\n";
      last_section = s;
    }
    std::string read_by = *k.kinds ? std::string(k.kinds) : "all";
    if (*k.when) read_by += ", when " + std::string(k.when);
    auto cell = [](std::string text) {  // a | inside a table cell must be escaped
      for (size_t at = text.find('|'); at != std::string::npos; at = text.find('|', at + 2))
        text.replace(at, 1, "\\|");
      return text;
    };
    os << "| `" << k.name << "` | " << k.type << " | `" << cell(k.fallback) << "` | "
       << cell(k.allowed) << " | " << cell(read_by) << " | " << cell(k.meaning) << " |\n";
  }
  return os.str();
}

std::string config_key_unused_reason(const std::string& name) {
  std::set<std::string> kinds, whens;
  bool every_kind = false, found = false;
  for (const ConfigKey& k : kKeys) {
    if (name != k.name) continue;
    found = true;
    if (*k.kinds == 0) every_kind = true;
    std::istringstream words(k.kinds);
    for (std::string w; words >> w;) kinds.insert(w);
    if (*k.when) whens.insert(k.when);
  }
  if (!found) return "";
  std::string out;
  if (!every_kind) {
    std::string list;
    for (const std::string& k : kinds) list += (list.empty() ? "" : ", ") + k;
    out = "read for model.kind " + list;
  }
  for (const std::string& w : whens) out += (out.empty() ? "read when " : " when ") + w;
  return out;
}

}  // namespace loom::train
