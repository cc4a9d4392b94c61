/* The one table of osdp_gpt's options and its parser (see options.h). */
#include "config.h"
#include "options.h"
#include "cli/app.h"
#include "osdp/compute.h"
#include "osdp/layout.h"
#include "osdp/optim.h"
#include "osdp/pipeline.h"
#include "osdp/planner.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum option_type {
    OPT_FLAG,        /* no value */
    OPT_INT,         /* a decimal integer in [lo, hi] (or the option's word) */
    OPT_SIZE,        /* bytes: a number with an optional K/M/G/T suffix (binary), whole bytes in [lo, hi] */
    OPT_FLOAT,       /* a finite number in [lo, hi] ((lo, hi] when lo_open) */
    OPT_ENUM,        /* one of the words of `choices`, "a|b|c": stored as its index */
    OPT_TEXT,        /* a non-empty file name or text */
    OPT_TEXT_MAYBE   /* as OPT_TEXT, but the value is optional: taken from the next argument unless that starts with '-' */
} option_type;

#define TRAIN OSDP_CMD_TRAIN
#define PLAN OSDP_CMD_PLAN
#define PROFILE OSDP_CMD_PROFILE
#define SAMPLE OSDP_CMD_SAMPLE
#define EVAL OSDP_CMD_EVAL
#define FIELD(f) offsetof(osdp_job, f)
#define OSDP_MAX_MEM_LIMIT 1152921504606846976.0   /* 2^60 bytes, as device files */

typedef struct option_row {
    const char *name;          /* without the leading dashes */
    char short_name;           /* -m for --model, or 0 */
    option_type type;
    unsigned commands;         /* the commands that take it */
    unsigned required;         /* the commands that need it */
    size_t field;              /* where the value goes in osdp_job */
    size_t flag_field;         /* OPT_TEXT_MAYBE: the int set when the option is given */
    double lo, hi;             /* OPT_INT, OPT_SIZE, OPT_FLOAT */
    int lo_open;               /* OPT_FLOAT: lo itself is refused */
    const char *choices;       /* OPT_ENUM: "none|all|auto"; OPT_INT: a word besides the numbers */
    long long word_value;      /* OPT_INT: the value of that word */
    const char *default_value; /* parsed like a given value before the command line (NULL: none) */
    const char *default_text;  /* for --help when the default is not a plain value */
    const char *metavar;
    const char *help;          /* continuation lines start with '\n' */
} option_row;

/* Ranges: what the runtime can honour (int fields, uint16 tokens, device
 * limits), never what a C type happens to hold. */
static const option_row g_options[] = {
    /* files */
    {.name = "model", .short_name = 'm', .type = OPT_TEXT, .commands = TRAIN, .field = FIELD(model),
     .default_value = "input:models/tiny.ini", .metavar = "FILE",
     .help = "model description"},
    {.name = "model", .type = OPT_TEXT, .commands = PLAN | PROFILE, .required = PLAN | PROFILE,
     .field = FIELD(model), .metavar = "FILE",
     .help = "model description (input/models/*.ini)"},
    {.name = "data", .short_name = 'd', .type = OPT_TEXT, .commands = TRAIN, .field = FIELD(data),
     .default_value = "input:data/addition.txt", .metavar = "FILE|DIR",
     .help = "llm.c .bin shard, directory of shards, or a text file"},
    {.name = "device", .type = OPT_TEXT, .commands = TRAIN | EVAL, .field = FIELD(device),
     .default_value = "input:devices/cpu_2core.ini", .metavar = "FILE",
     .help = "device information for --plan auto (--mem-limit overrides its limit)"},
    {.name = "device", .type = OPT_TEXT, .commands = PLAN, .required = PLAN, .field = FIELD(device),
     .metavar = "FILE",
     .help = "device information (input/devices/*.ini)"},
    {.name = "device", .type = OPT_TEXT, .commands = PROFILE, .field = FIELD(device), .metavar = "FILE",
     .help = "on 1 rank (one GPU): the device file whose network figures are kept\n"
        "(gamma, the step work and mem_limit are measured)"},
    {.name = "out", .type = OPT_TEXT, .commands = PLAN, .field = FIELD(out), .metavar = "FILE",
     .help = "write the plan file (for osdp_gpt train --plan FILE)"},
    {.name = "out", .type = OPT_TEXT, .commands = PROFILE, .required = PROFILE, .field = FIELD(out),
     .metavar = "FILE",
     .help = "the device file to write"},
    {.name = "name", .type = OPT_TEXT, .commands = PROFILE, .field = FIELD(name), .default_value = "profiled",
     .metavar = "NAME",
     .help = "the device's name in the file"},
    {.name = "log", .type = OPT_TEXT, .commands = TRAIN, .field = FIELD(log), .metavar = "FILE",
     .help = "machine-readable record of every step (rank 0): a config record, one record per step,\n"
        "a summary; JSON Lines when FILE ends in .jsonl, key=value lines otherwise"},
    {.name = "log-every", .type = OPT_INT, .commands = TRAIN, .field = FIELD(log_every), .lo = 1, .hi = 1e12,
     .default_value = "1", .metavar = "N",
     .help = "print the progress line every N steps (and the first and last); --log keeps every step"},
    {.name = "val-data", .type = OPT_TEXT, .commands = TRAIN | EVAL, .field = FIELD(val_data), .metavar = "FILE|DIR",
     .default_text = "--data's `*_val_*.bin` shards when --data is a directory that has them",
     .help = "validation data (same formats as --data), never trained on"},
    {.name = "eval-every", .type = OPT_INT, .commands = TRAIN, .field = FIELD(eval_every), .lo = 1, .hi = 1e12,
     .metavar = "N", .default_text = "the end of training only, when there is validation data",
     .help = "the validation loss after every N-th optimizer step (and after the last)"},
    {.name = "eval-batches", .type = OPT_INT, .commands = TRAIN, .field = FIELD(eval_batches), .lo = 1,
     .hi = 1 << 20, .default_value = "4", .metavar = "K",
     .help = "validation batches of the global batch's size (a fixed set of sequences)"},
    {.name = "dump-weights", .type = OPT_TEXT, .commands = TRAIN, .field = FIELD(dump_weights), .metavar = "FILE",
     .help = "after training, write every parameter as float32 (rank 0)"},
    /* what to run */
    {.name = "ranks", .type = OPT_INT, .commands = PLAN, .required = PLAN, .field = FIELD(ranks), .lo = 1,
     .hi = 1 << 20, .metavar = "N",
     .help = "ranks to plan for (with --tp T: the mesh of T x D ranks)"},
    {.name = "pp", .type = OPT_INT, .commands = PLAN, .field = FIELD(pp), .lo = 1, .hi = OSDP_MAX_STAGES,
     .choices = "auto", .word_value = OSDP_PP_AUTO, .default_value = "1", .metavar = "P|auto",
     .help = "pipeline stages: the mesh N = P x D x T, each stage's operators planned over its D ranks;\n"
        "the step's micro-batches: --global-batch / (D x micro-batch), else 4 P (auto: the 3D search\n"
        "over P, T (inside a node; fixed by --tp T), the stage split and the micro-batch, beside\n"
        "DeepSpeed-3D-like, Megatron-like, FSDP and DDP)"},
    {.name = "steps", .short_name = 's', .type = OPT_INT, .commands = TRAIN, .field = FIELD(steps), .hi = 1e12,
     .default_value = "100", .metavar = "N",
     .help = "optimizer steps in all: a resumed run continues up to step N"},
    {.name = "batch", .short_name = 'b', .type = OPT_INT, .commands = TRAIN | EVAL, .field = FIELD(batch), .lo = 1,
     .hi = 1 << 20, .metavar = "B", .default_text = "the planner's choice with --plan auto, else 8",
     .help = "sequences per rank per micro-step"},
    {.name = "batch", .type = OPT_INT, .commands = PLAN, .field = FIELD(batch), .lo = 1, .hi = 1 << 20,
     .metavar = "B", .default_text = "the scheduler tries 1, 2, ...",
     .help = "plan for this micro-batch only"},
    {.name = "max-batch", .type = OPT_INT, .commands = PLAN, .field = FIELD(max_batch), .lo = 1, .hi = 1 << 20,
     .metavar = "B",
     .help = "the scheduler's largest micro-batch"},
    {.name = "global-batch", .type = OPT_INT, .commands = TRAIN | EVAL, .field = FIELD(global_batch), .lo = 1,
     .hi = 1 << 30, .metavar = "G",
     .default_text = "B x ranks (8 x ranks when the planner picks B); a resume and eval --ckpt keep the checkpoint's",
     .help = "sequences per optimizer step over all ranks (a multiple of B x ranks)"},
    {.name = "global-batch", .type = OPT_INT, .commands = PLAN, .field = FIELD(global_batch), .lo = 1, .hi = 1 << 30,
     .metavar = "G", .default_text = "none: accumulation 1",
     .help = "sequences per optimizer step: micro-batch b divides G/N, accumulation G/(N b)"},
    {.name = "seq-len", .type = OPT_INT, .commands = TRAIN | EVAL, .field = FIELD(seq_len), .lo = 1, .hi = 1 << 20,
     .metavar = "T", .default_text = "the model's ctx; a resume and eval --ckpt keep the checkpoint's",
     .help = "tokens per sequence (at most the model's ctx)"},
    {.name = "seq-len", .type = OPT_INT, .commands = PLAN | PROFILE, .field = FIELD(seq_len), .lo = 1, .hi = 1 << 20,
     .metavar = "T", .default_text = "the model's ctx",
     .help = "tokens per sequence (at most the model's ctx)"},
    {.name = "plan", .short_name = 'p', .type = OPT_TEXT, .commands = TRAIN | EVAL, .field = FIELD(plan),
     .default_value = "auto", .metavar = "auto|dp|zdp|FILE",
     .help = "the planner's plan (modes per operator, and the micro-batch and accumulation\n"
        "unless --batch is given), DP or ZDP for every operator, or a plan file"},
    {.name = "tp", .type = OPT_INT, .commands = TRAIN | PLAN | EVAL, .field = FIELD(tp), .lo = 1, .hi = OSDP_MAX_TP,
     .choices = "auto", .word_value = OSDP_TP_AUTO, .default_value = "1", .metavar = "T|auto",
     .help = "tensor-parallel degree: groups of T consecutive ranks hold each operator's Megatron parts,\n"
        "the plan shards those parts over ranks / T data-parallel ranks (auto: the planner chooses T;\n"
        "train: with --plan auto only)"},
    {.name = "tp", .type = OPT_INT, .commands = PROFILE, .field = FIELD(tp), .lo = 1, .hi = OSDP_MAX_TP,
     .default_value = "1", .metavar = "T",
     .help = "tensor-parallel degree: the groups of T consecutive ranks whose collectives are measured"},
    {.name = "pp", .type = OPT_INT, .commands = TRAIN | EVAL, .field = FIELD(pp), .lo = 1, .hi = OSDP_MAX_STAGES,
     .choices = "auto", .word_value = OSDP_PP_AUTO, .default_value = "1", .metavar = "P|auto",
     .help = "pipeline stages: the outermost mesh axis, each stage a contiguous range of operators\n"
        "(--stages) over ranks / P, the step's micro-batches (accumulation) flowing through them\n"
        "(auto, with --plan auto: the 3D search chooses P, and T with --tp auto, and the stages)"},
    {.name = "stages", .type = OPT_TEXT, .commands = TRAIN | PLAN | EVAL, .field = FIELD(stages), .metavar = "A:B,B:C,...",
     .default_text = "balanced by the cost model's operator times",
     .help = "with --pp P: stage s's operators [A, B), P contiguous ranges from 0 to the operator count"},
    {.name = "schedule", .type = OPT_ENUM, .commands = TRAIN | PLAN | EVAL, .field = FIELD(pipe_schedule),
     .choices = "1f1b|gpipe|interleaved", .default_value = "1f1b", .metavar = "1f1b|gpipe|interleaved",
     .help = "with --pp P: 1F1B (PipeDream-flush: at most P - s micro-batches in flight on stage s),\n"
        "GPipe (all forwards, then all backwards) or interleaved 1F1B (Megatron-LM's virtual stages,\n"
        "--virtual-stages V: a bubble of (P - 1) / (V M)); the same losses bit for bit; --pp auto with\n"
        "neither this nor --virtual-stages: 1F1B or interleaved with V, as the 3D search finds faster"},
    {.name = "virtual-stages", .type = OPT_INT, .commands = TRAIN | PLAN | EVAL, .field = FIELD(virtual_stages), .lo = 1,
     .hi = OSDP_MAX_STAGES, .default_value = "1", .metavar = "V",
     .help = "with --schedule interleaved: V model chunks per stage, the operators cut into P V contiguous\n"
        "chunks (--stages then lists P V ranges), stage s holding chunks s, s + P, ..; the micro-batches\n"
        "per step must be a multiple of P (--schedule interleaved with --pp auto and no V: V searched)"},
    {.name = "split", .type = OPT_INT, .commands = TRAIN | PLAN | EVAL, .field = FIELD(split), .lo = 1,
     .hi = OSDP_MAX_SLICES, .choices = "auto", .word_value = OSDP_SPLIT_AUTO, .default_value = "1",
     .metavar = "G|auto",
     .help = "operator splitting: G+1 choices per operator, k of G slices ZDP (auto: k of any\n"
        "G in 1, 2, 4, 8, the planner chooses G per operator; train --plan zdp makes every operator G/G)"},
    {.name = "recompute", .type = OPT_ENUM, .commands = TRAIN | PLAN | EVAL, .field = FIELD(recompute),
     .choices = "none|all|auto", .default_value = "none", .metavar = "none|all|auto",
     .help = "activation checkpointing of attn and mlp operators (auto: the planner\n"
        "chooses per operator, with --plan auto; train: a plan file's 'recompute' also counts)"},
    {.name = "grad-reduce", .type = OPT_ENUM, .commands = TRAIN | PLAN | EVAL, .field = FIELD(grad_reduce),
     .choices = "every|auto|once", .default_value = "auto", .metavar = "auto|once|every",
     .help = "gradient accumulation: reduce an operator's gradients once per optimizer step (its\n"
        "full gradients summed over the micro-batches, all run) or every micro-batch (auto: the\n"
        "planner chooses per operator and slice with --plan auto, a plan file's 'reduce-once [J]'\n"
        "decides with a plan file, every with --plan dp / zdp; once / every: every operator, whatever\n"
        "the plan)"},
    {.name = "attention", .type = OPT_ENUM, .commands = TRAIN | PLAN | PROFILE | EVAL, .field = FIELD(attention),
     .choices = "tiled|naive", .default_value = "tiled", .metavar = "tiled|naive",
     .default_text = "tiled where the backend has it (cpu, cuda), else naive",
     .help = "causal attention: tiled with an online softmax (a log-sum-exp per row kept), or\n"
        "naive (the (T, T) probabilities kept: the reference)"},
    {.name = "head", .type = OPT_ENUM, .commands = TRAIN | PLAN | PROFILE | EVAL, .field = FIELD(head),
     .choices = "fused|naive", .default_value = "fused", .metavar = "fused|naive",
     .default_text = "fused where the backend has it (cpu, cuda), else naive",
     .help = "LM head: fused linear + cross-entropy (logits in chunks of tokens, never all kept;\n"
        "the head cannot be split), or naive (the (T, V) probabilities kept: the reference)"},
    {.name = "search", .type = OPT_ENUM, .commands = PLAN, .field = FIELD(search), .choices = "exact|dfs",
     .default_value = "exact", .metavar = "exact|dfs",
     .help = "plan search (dfs: the paper's, with a time budget)"},
    {.name = "dfs-limit", .type = OPT_FLOAT, .commands = PLAN, .field = FIELD(dfs_limit), .hi = 86400, .lo_open = 1,
     .metavar = "S",
     .help = "wall-clock budget of --search dfs for the whole run, seconds"},
    {.name = "cost-model", .type = OPT_ENUM, .commands = TRAIN | PLAN | EVAL, .field = FIELD(cost_model),
     .choices = "paper|overlap", .default_value = "paper", .metavar = "paper|overlap",
     .help = "step time: compute + comm (paper eq. 2), or per operator max(compute, comm)\n"
        "with prefetch (train: for --plan auto and the logged pred_step_s)"},
    {.name = "json", .type = OPT_FLAG, .commands = PLAN, .field = FIELD(json),
     .help = "one JSON object on stdout instead of the tables"},
    {.name = "mem-limit", .type = OPT_SIZE, .commands = TRAIN | EVAL, .field = FIELD(mem_limit), .lo = 1,
     .hi = OSDP_MAX_MEM_LIMIT, .metavar = "BYTES", .default_text = "none (with --plan auto: the device file's)",
     .help = "emulated device memory per rank: 8G, 512M, 1000000"},
    {.name = "mem-limit", .type = OPT_SIZE, .commands = PLAN, .field = FIELD(mem_limit), .lo = 1,
     .hi = OSDP_MAX_MEM_LIMIT, .metavar = "BYTES", .default_text = "the device file's mem_limit",
     .help = "memory per rank: 8G, 512M, 1000000"},
    {.name = "mem-limit", .type = OPT_SIZE, .commands = PROFILE, .field = FIELD(mem_limit), .lo = 1,
     .hi = OSDP_MAX_MEM_LIMIT, .metavar = "BYTES", .default_text = "physical memory / ranks on the node",
     .help = "the device file's mem_limit: 8G, 512M, 1000000"},
    {.name = "no-prefetch", .type = OPT_FLAG, .commands = TRAIN | PLAN | EVAL, .field = FIELD(no_prefetch),
     .help = "do not overlap all-gathers / reduce-scatters with compute"},
    {.name = "hierarchical", .type = OPT_FLAG, .commands = TRAIN | PLAN | EVAL, .field = FIELD(hierarchical),
     .help = "offer plan mode h (shard inside the node, replicate across nodes) to the planner where a\n"
             "data-parallel group spans nodes of a two-level device, equally: the default, so this changes\n"
             "nothing (kept for the command lines that name it)"},
    {.name = "no-hierarchical", .type = OPT_FLAG, .commands = TRAIN | PLAN | EVAL, .field = FIELD(no_hierarchical),
     .help = "never offer plan mode h: every ZDP operator sharded over the whole data-parallel group"},
    /* optimizer */
    {.name = "seed", .type = OPT_INT, .commands = TRAIN, .field = FIELD(seed), .hi = 1e18, .default_value = "1337",
     .metavar = "S",
     .help = "weights and data order"},
    {.name = "lr", .type = OPT_FLOAT, .commands = TRAIN, .field = FIELD(lr), .hi = 10, .lo_open = 1, .metavar = "X",
     .help = "AdamW peak learning rate"},
    {.name = "warmup", .type = OPT_INT, .commands = TRAIN, .field = FIELD(warmup), .hi = 1e9, .metavar = "N",
     .help = "linear warm-up steps"},
    {.name = "min-lr-frac", .type = OPT_FLOAT, .commands = TRAIN, .field = FIELD(min_lr_frac), .hi = 1,
     .metavar = "X",
     .help = "the cosine decays to lr x X"},
    {.name = "weight-decay", .type = OPT_FLOAT, .commands = TRAIN, .field = FIELD(weight_decay), .hi = 10,
     .metavar = "X",
     .help = "AdamW decoupled weight decay"},
    {.name = "grad-clip", .type = OPT_FLOAT, .commands = TRAIN, .field = FIELD(grad_clip), .hi = 1e9, .metavar = "X",
     .help = "global gradient norm clipping (0: off)"},
    {.name = "lr-steps", .type = OPT_INT, .commands = TRAIN, .field = FIELD(lr_steps), .lo = 1, .hi = 1e12,
     .metavar = "N", .default_text = "--steps; a resume keeps the checkpoint's",
     .help = "cosine horizon"},
    /* the machine */
    {.name = "threads", .type = OPT_INT, .commands = TRAIN | PROFILE | SAMPLE | EVAL, .field = FIELD(threads), .lo = 1, .hi = 4096,
     .metavar = "N", .default_text = "node cores / ranks on the node",
     .help = "compute threads per rank (at most the node's cores)"},
    {.name = "backend", .type = OPT_ENUM, .commands = TRAIN | PROFILE | EVAL, .field = FIELD(backend), .choices = "cpu|cuda",
     .default_value = "cpu", .metavar = "cpu|cuda",
     .help = "compute backend"},
    {.name = "precision", .type = OPT_ENUM, .commands = TRAIN | PROFILE | EVAL, .field = FIELD(precision), .choices = "bf16|fp32",
     .metavar = "bf16|fp32", .default_text = "bf16 with cuda, fp32 on cpu",
     .help = "working weights and their all-gathers (on cpu bf16 only tests the\n"
        "mixed-precision path); master weights, moments, gradients, activations: always fp32"},
    {.name = "residual-dtype", .type = OPT_ENUM, .commands = TRAIN | PLAN | EVAL, .field = FIELD(residual_dtype),
     .choices = "fp32|bf16", .default_value = "fp32", .metavar = "fp32|bf16",
     .help = "the residual stream (every operator's output): bf16 rounds it to bf16 values and a\n"
        "recomputed operator keeps it in 2 bytes, as Megatron-LM's default; only with bf16 weights\n"
        "(train, eval: --precision bf16; plan: a device of precision = bf16)"},
    {.name = "activation-dtype", .type = OPT_ENUM, .commands = TRAIN | PLAN | EVAL, .field = FIELD(activation_dtype),
     .choices = "fp32|bf16", .default_value = "fp32", .metavar = "fp32|bf16",
     .help = "the activations the backward reads around the products (layernorm outputs, qkv,\n"
        "attention heads, fc and GELU outputs): bf16 stores them in 2 bytes, rounded, as\n"
        "Megatron-LM does; only with bf16 weights (as --residual-dtype)"},
    {.name = "peak-flops", .type = OPT_FLOAT, .commands = TRAIN, .field = FIELD(peak_flops), .lo = 1e3, .hi = 1e18,
     .metavar = "X", .default_text = "measured sgemm rate",
     .help = "device peak FLOP/s for MFU"},
    {.name = "ranks-per-node", .type = OPT_INT, .commands = TRAIN | PROFILE | EVAL, .field = FIELD(ranks_per_node), .lo = 1,
     .hi = 1 << 20, .metavar = "R", .default_text = "none: the real nodes (MPI_COMM_TYPE_SHARED)",
     .help = "emulated nodes: world rank r sits on node r / R (for tests and benchmarks on one machine;\n"
        "every line that depends on it says \"emulated\")"},
    {.name = "ranks-per-node", .type = OPT_INT, .commands = PLAN, .field = FIELD(ranks_per_node), .lo = 1,
     .hi = 1 << 20, .metavar = "R", .default_text = "the device file's ranks_per_node",
     .help = "ranks one node holds: a data-parallel group that spans nodes is priced at the\n"
        "device's inter-node figures, a tensor-parallel group must fit in a node"},
    {.name = "nodes", .type = OPT_INT, .commands = PLAN, .field = FIELD(nodes), .lo = 1, .hi = 1 << 20,
     .metavar = "K", .default_text = "the device file's ranks_per_node",
     .help = "the ranks sit on K nodes of ranks / K ranks each (as --ranks-per-node ranks / K)"},
    {.name = "emulate-link", .type = OPT_TEXT, .commands = TRAIN | PROFILE | EVAL, .field = FIELD(emulate_link),
     .metavar = "BW,LAT", .default_text = "none",
     .help = "with --ranks-per-node: a collective or message whose group spans emulated nodes takes at\n"
        "least the time a link of BW bytes/s (K, M, G, T: 10^3..10^12) and latency LAT (s, ms, us, ns)\n"
        "would need: 12.5G,5us (a ring over n ranks: (n-1)(LAT + S/n / BW))"},
    {.name = "emulate-link", .type = OPT_TEXT, .commands = PLAN, .field = FIELD(emulate_link), .metavar = "BW,LAT",
     .default_text = "the device file's [internode_*]",
     .help = "price the link between nodes as this emulated one (12.5G,5us; needs a node size):\n"
        "each inter-node figure the larger of the in-node one and the link's"},
    {.name = "reps", .type = OPT_INT, .commands = PROFILE, .field = FIELD(reps), .lo = 1,
     .hi = OSDP_PROFILE_MAX_REPS, .default_value = "7", .metavar = "R",
     .help = "repetitions per measurement (the median counts)"},
    {.name = "quiet", .type = OPT_FLAG, .commands = TRAIN | EVAL, .field = FIELD(quiet),
     .help = "only the summary line"},
    /* checkpoints */
    {.name = "ckpt-dir", .type = OPT_TEXT, .commands = TRAIN, .field = FIELD(ckpt_dir), .metavar = "DIR",
     .help = "checkpoints go to DIR/step_XXXXXXXX.h5; DIR/latest names the newest (saved at the end\n"
        "of the run, every --save-every steps, and on SIGTERM / SIGUSR1: finish the step, save, exit 0)"},
    {.name = "save-every", .type = OPT_INT, .commands = TRAIN, .field = FIELD(save_every), .lo = 1, .hi = 1e12,
     .metavar = "K",
     .help = "save after every K-th optimizer step"},
    {.name = "keep", .type = OPT_INT, .commands = TRAIN, .field = FIELD(keep), .hi = 1e9, .default_value = "3",
     .metavar = "K",
     .help = "keep the last K saves (0: all)"},
    {.name = "resume", .type = OPT_TEXT_MAYBE, .commands = TRAIN, .field = FIELD(resume_file),
     .flag_field = FIELD(resume), .metavar = "[FILE]",
     .help = "continue from FILE or DIR/latest: weights, AdamW moments, step, seed, global batch,\n"
        "cosine horizon, sequence length (any rank count, any plan)"},
    {.name = "resume-fallback", .type = OPT_FLAG, .commands = TRAIN, .field = FIELD(resume_fallback),
     .help = "if the checkpoint is refused, try the previous save in its directory"},
    {.name = "init-from", .type = OPT_TEXT, .commands = TRAIN, .field = FIELD(init_from), .metavar = "FILE",
     .help = "start from the weights of a checkpoint (fresh optimizer, step 0)"},
    {.name = "init-from", .type = OPT_TEXT, .commands = EVAL, .field = FIELD(init_from), .metavar = "WEIGHTS",
     .help = "evaluate the weights of a weights file or checkpoint, with train's defaults for a fresh\n"
        "run (--ckpt instead: the batches the checkpoint's run validated on)"},
    {.name = "data", .type = OPT_TEXT, .commands = EVAL, .field = FIELD(data), .metavar = "FILE|DIR",
     .help = "the data to evaluate: a directory's *_val_*.bin shards when it has them (as train\n"
        "validates), else the directory's shards, an llm.c .bin shard, or a text file"},
    {.name = "log", .type = OPT_TEXT, .commands = EVAL, .field = FIELD(log), .metavar = "FILE",
     .help = "the evaluation's record (rank 0): JSON Lines when FILE ends in .jsonl, key=value otherwise"},
    {.name = "batches", .type = OPT_INT, .commands = EVAL, .field = FIELD(eval_batches), .lo = 1, .hi = 1 << 20,
     .metavar = "K", .default_text = "every sequence of the data once, in whole global batches",
     .help = "the first K batches of train's validation set (train --eval-batches K: the same\n"
        "sequences, the same loss)"},
    {.name = "on-write-error", .type = OPT_ENUM, .commands = TRAIN, .field = FIELD(on_write_error),
     .choices = "stop|continue", .default_value = "stop", .metavar = "stop|continue",
     .help = "a save or a --log write that fails (a full disk): stop every rank with the error, or go on\n"
        "without that save (a warning each time) or without the log; either way the partial file is\n"
        "removed and DIR/latest names the last good save"},
    /* sampling */
    {.name = "ckpt", .type = OPT_TEXT, .commands = SAMPLE | EVAL, .required = SAMPLE, .field = FIELD(ckpt), .metavar = "FILE",
     .help = "a checkpoint or weights file: the model and its weights (any rank count, any plan)"},
    {.name = "prompt", .type = OPT_TEXT, .commands = SAMPLE, .field = FIELD(prompt), .metavar = "TEXT",
     .default_text = "a newline (bytes), the end-of-text token (a token table)",
     .help = "the text to continue (with a token table: cut by greedy longest match)"},
    {.name = "prompt-ids", .type = OPT_TEXT, .commands = SAMPLE, .field = FIELD(prompt_ids), .metavar = "ID,ID..",
     .help = "the prompt as token ids, instead of --prompt"},
    {.name = "tokens", .type = OPT_INT, .commands = SAMPLE, .field = FIELD(tokens), .lo = 1, .hi = 65536,
     .default_value = "128", .metavar = "N",
     .help = "tokens to generate"},
    {.name = "temperature", .type = OPT_FLOAT, .commands = SAMPLE, .field = FIELD(temperature), .hi = 100,
     .default_value = "1", .metavar = "X",
     .help = "softmax temperature (0: greedy, the most probable token)"},
    {.name = "top-k", .type = OPT_INT, .commands = SAMPLE, .field = FIELD(top_k), .lo = 1, .hi = 1 << 24,
     .metavar = "K", .default_text = "the whole vocabulary",
     .help = "sample among the K most probable tokens (at most the vocabulary)"},
    {.name = "seed", .type = OPT_INT, .commands = SAMPLE, .field = FIELD(seed), .hi = 1e18, .default_value = "1337",
     .metavar = "S",
     .help = "the sampling RNG: a seed gives the same text on any rank count"},
    {.name = "tokenizer", .type = OPT_TEXT, .commands = TRAIN | SAMPLE, .field = FIELD(tokenizer), .metavar = "FILE",
     .default_text = "none: vocabulary 256 decodes as bytes, another prints token ids",
     .help = "token table in llm.c's tokenizer format, version 2 (doc/tokenizer-format.md;\n"
        "scripts/prepare_data.py writes NAME_tokenizer.bin): decodes samples"},
    {.name = "sample-every", .type = OPT_INT, .commands = TRAIN, .field = FIELD(sample_every), .lo = 1, .hi = 1e12,
     .metavar = "N",
     .help = "rank 0 prints a sample after every N-th step and after the last (temperature 1,\n"
        "the whole vocabulary, from a newline or the end-of-text token; the losses do not change)"},
    {.name = "sample-tokens", .type = OPT_INT, .commands = TRAIN, .field = FIELD(sample_tokens), .lo = 1, .hi = 65536,
     .default_value = "64", .metavar = "N",
     .help = "tokens per --sample-every sample"},
};
#define N_OPTIONS ((int)(sizeof g_options / sizeof g_options[0]))
_Static_assert(sizeof g_options / sizeof g_options[0] <= OSDP_MAX_OPTIONS, "raise OSDP_MAX_OPTIONS");

const char *osdp_command_name(osdp_command command)
{
    return command == OSDP_CMD_TRAIN ? "train" : command == OSDP_CMD_PLAN ? "plan"
         : command == OSDP_CMD_SAMPLE ? "sample" : command == OSDP_CMD_EVAL ? "eval" : "profile";
}

/* the row of `name` for `command`, -1 when the command has no such option */
static int find_row(osdp_command command, const char *name, size_t len)
{
    for (int i = 0; i < N_OPTIONS; i++)
        if ((g_options[i].commands & command) && strlen(g_options[i].name) == len &&
            strncmp(g_options[i].name, name, len) == 0)
            return i;
    return -1;
}

/* the next word of a '|'-separated choices list: 0 at the end */
static int next_word(const char **list, const char **word, size_t *len)
{
    if (!**list) return 0;
    *word = *list;
    *len = strcspn(*list, "|");
    *list += *len;
    if (**list == '|') (*list)++;
    return 1;
}

/* index of `word` among the words of `choices`, -1 if absent */
static int choice_index(const char *choices, const char *word)
{
    const char *w;
    size_t len, n = strlen(word);
    for (int index = 0; next_word(&choices, &w, &len); index++)
        if (len == n && strncmp(w, word, n) == 0) return index;
    return -1;
}

/* "none, all or auto" */
static void choices_text(const char *choices, char *buf, size_t n)
{
    const char *w, *list = choices;
    size_t len, at = 0;
    int count = 0;
    while (next_word(&list, &w, &len)) count++;
    buf[0] = 0;
    for (int index = 0; next_word(&choices, &w, &len) && at < n; index++)
        at += (size_t)snprintf(buf + at, n - at, "%s%.*s", index == 0 ? "" : index == count - 1 ? " or " : ", ",
                               (int)len, w);
}

osdp_dtype osdp_job_weights(const osdp_job *job)
{
    if (osdp_option_given(job, "precision")) return job->precision == OSDP_PRECISION_BF16 ? OSDP_BFLOAT16 : OSDP_FLOAT32;
    return job->backend == OSDP_BACKEND_CUDA ? OSDP_BFLOAT16 : OSDP_FLOAT32;
}

osdp_status osdp_job_residual(const osdp_job *job, osdp_dtype weights, const char *weights_from, osdp_dtype *out)
{
    *out = OSDP_FLOAT32;
    if (job->residual_dtype != OSDP_RESIDUAL_BF16) return OSDP_OK;
    /* its bf16 copies are made by the mixed-precision tables' rounding (osdp/compute.h), and a bf16 stream
     * beside fp32 weights is no configuration anyone trains */
    if (weights != OSDP_BFLOAT16)
        return osdp_error_set(OSDP_ERR_INPUT, "--residual-dtype bf16 needs bf16 weights, and %s gives %s ones (use "
                              "--residual-dtype fp32, or bf16 weights)", weights_from, osdp_dtype_name(weights));
    *out = OSDP_BFLOAT16;
    return OSDP_OK;
}

osdp_status osdp_job_activations(const osdp_job *job, osdp_dtype weights, const char *weights_from,
                                 osdp_model_config *cfg)
{
    cfg->act_bf16 = 0;
    if (job->activation_dtype != OSDP_RESIDUAL_BF16) return OSDP_OK;
    /* rounded by the mixed-precision tables (osdp/compute.h), whose products round their inputs anyway */
    if (weights != OSDP_BFLOAT16)
        return osdp_error_set(OSDP_ERR_INPUT, "--activation-dtype bf16 needs bf16 weights, and %s gives %s ones (use "
                              "--activation-dtype fp32, or bf16 weights)", weights_from, osdp_dtype_name(weights));
    cfg->act_bf16 = 1;
    return OSDP_OK;
}

const char *osdp_option_word(const char *name, int value)
{
    static char word[32];
    for (int i = 0; i < N_OPTIONS; i++) {
        if (strcmp(g_options[i].name, name) != 0 || g_options[i].type != OPT_ENUM) continue;
        const char *list = g_options[i].choices, *w;
        size_t len;
        for (int index = 0; next_word(&list, &w, &len); index++)
            if (index == value) {
                snprintf(word, sizeof word, "%.*s", (int)len, w);
                return word;
            }
    }
    return "?";
}

/* "[1, 1048576]" for the range of an integer, size or float row */
static void range_text(const option_row *o, char *buf, size_t n)
{
    if (o->type == OPT_FLOAT)
        snprintf(buf, n, "%s%.17g, %.17g]", o->lo_open ? "(" : "[", o->lo, o->hi);
    else
        snprintf(buf, n, "[%.0f, %.0f]", o->lo, o->hi);
}

static osdp_status refuse(const option_row *o, const char *value, const char *expected)
{
    return osdp_error_set(OSDP_ERR_INPUT, "--%s '%s': expected %s", o->name, value, expected);
}

static osdp_status parse_int(const option_row *o, const char *value, long long *out)
{
    char range[96], expected[160];
    range_text(o, range, sizeof range);
    if (o->choices) snprintf(expected, sizeof expected, "an integer in %s or %s", range, o->choices);
    else snprintf(expected, sizeof expected, "an integer in %s", range);
    if (o->choices && strcmp(value, o->choices) == 0) {
        *out = o->word_value;
        return OSDP_OK;
    }
    char *end = NULL;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    /* strtoll skips leading blanks and takes "+"; a value is its digits alone */
    int digits_only = value[0] == '-' ? value[1] >= '0' && value[1] <= '9' : value[0] >= '0' && value[0] <= '9';
    /* the range compared as integers: as doubles, 10^18 + 64 would round to 10^18 and pass */
    if (end == value || *end || errno == ERANGE || !digits_only || v < (long long)o->lo || v > (long long)o->hi)
        return refuse(o, value, expected);
    *out = v;
    return OSDP_OK;
}

static osdp_status parse_size(const option_row *o, const char *value, long long *out)
{
    char range[96], expected[200];
    range_text(o, range, sizeof range);
    snprintf(expected, sizeof expected, "a whole number of bytes in %s, such as 8G, 512M or 1000000", range);
    char *end = NULL;
    int starts_with_digit = value[0] >= '0' && value[0] <= '9';
    double v = strtod(value, &end);
    if (!starts_with_digit || end == value) return refuse(o, value, expected);
    double mult = 1;
    const char *units = "KMGT";
    const char *u = *end ? strchr(units, *end >= 'a' ? *end - 'a' + 'A' : *end) : NULL;
    if (u && *end) {
        for (const char *p = units; p <= u; p++) mult *= 1024.0;
        end++;
        if (*end == 'i') end++;
    }
    if (*end == 'B' || *end == 'b') end++;
    double bytes = v * mult;
    if (*end || !isfinite(bytes) || bytes != floor(bytes) || bytes < o->lo || bytes > o->hi)
        return refuse(o, value, expected);
    *out = (long long)bytes;
    return OSDP_OK;
}

static osdp_status parse_float(const option_row *o, const char *value, double *out)
{
    char range[96], expected[160];
    range_text(o, range, sizeof range);
    snprintf(expected, sizeof expected, "a number in %s", range);
    char *end = NULL;
    errno = 0;
    double v = strtod(value, &end);
    if (end == value || *end || value[0] == ' ' || !isfinite(v) || (o->lo_open ? v <= o->lo : v < o->lo) || v > o->hi)
        return refuse(o, value, expected);
    *out = v;
    return OSDP_OK;
}

/* the value of row o into the job */
static osdp_status set_value(const option_row *o, const char *value, osdp_job *job)
{
    char *at = (char *)job + o->field;
    switch (o->type) {
    case OPT_FLAG: *(int *)at = 1; return OSDP_OK;
    case OPT_INT: return parse_int(o, value, (long long *)at);
    case OPT_SIZE: return parse_size(o, value, (long long *)at);
    case OPT_FLOAT: return parse_float(o, value, (double *)at);
    case OPT_ENUM: {
        int index = choice_index(o->choices, value);
        if (index < 0) {
            char words[128];
            choices_text(o->choices, words, sizeof words);
            return refuse(o, value, words);
        }
        *(int *)at = index;
        return OSDP_OK;
    }
    case OPT_TEXT:
    case OPT_TEXT_MAYBE:
        if (o->flag_field) *(int *)((char *)job + o->flag_field) = 1;
        if (value && !*value) return osdp_error_set(OSDP_ERR_INPUT, "--%s: empty %s", o->name, o->metavar);
        *(const char **)at = value;
        return OSDP_OK;
    }
    return OSDP_ERR_INTERNAL;
}

/* defaults that are not options' values: the optimizer's and the planner's
 * own, so that each lives in one place */
static void job_defaults(osdp_command command, osdp_job *job)
{
    static char paths[4][4096];
    int n_paths = 0;
    memset(job, 0, sizeof *job);
    job->command = command;
    osdp_optim_config optim;
    osdp_optim_defaults(&optim);
    job->lr = optim.lr;
    job->min_lr_frac = optim.min_lr_frac;
    job->weight_decay = optim.weight_decay;
    job->grad_clip = optim.grad_clip;
    job->warmup = optim.warmup_steps;
    osdp_planner_options planner;
    osdp_planner_defaults(&planner);
    job->max_batch = planner.max_micro_batch;
    job->dfs_limit = planner.dfs_time_limit_s;
    for (int i = 0; i < N_OPTIONS; i++) {
        const option_row *o = &g_options[i];
        if (!(o->commands & command) || !o->default_value) continue;
        const char *value = o->default_value;
        if (strncmp(value, "input:", 6) == 0 && n_paths < 4)   /* a default input file of the source tree */
            value = osdp_default_input(value + 6, paths[n_paths++], (int)sizeof paths[0]);
        if (set_value(o, value, job) != OSDP_OK) abort();   /* a default outside its own range: a bug in the table */
    }
}

osdp_status osdp_options_parse(osdp_command command, int argc, char *const *argv, osdp_job *job)
{
    job_defaults(command, job);
    const char *cmd = osdp_command_name(command);
    int i = 1;
    for (; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--") == 0) { i++; break; }
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            job->help = 1;
            return OSDP_OK;
        }
        int row = -1;
        const char *value = NULL;
        if (arg[0] == '-' && arg[1] == '-') {
            const char *eq = strchr(arg + 2, '=');
            row = find_row(command, arg + 2, eq ? (size_t)(eq - arg - 2) : strlen(arg + 2));
            if (eq) value = eq + 1;
        } else if (arg[0] == '-' && arg[1] && !arg[2]) {
            for (int r = 0; r < N_OPTIONS && row < 0; r++)
                if (g_options[r].short_name == arg[1] && (g_options[r].commands & command)) row = r;
        } else {
            return osdp_error_set(OSDP_ERR_INPUT, "%s: unexpected argument '%s' (see osdp_gpt %s --help)", cmd, arg, cmd);
        }
        if (row < 0)
            return osdp_error_set(OSDP_ERR_INPUT, "%s: unknown option '%s' (see osdp_gpt %s --help)", cmd, arg, cmd);
        const option_row *o = &g_options[row];
        if (o->type == OPT_FLAG && value)
            return osdp_error_set(OSDP_ERR_INPUT, "--%s takes no value (given '%s')", o->name, value);
        if (!value && o->type == OPT_TEXT_MAYBE && i + 1 < argc && argv[i + 1][0] != '-') value = argv[++i];
        else if (!value && o->type != OPT_FLAG && o->type != OPT_TEXT_MAYBE) {
            if (i + 1 >= argc)
                return osdp_error_set(OSDP_ERR_INPUT, "--%s needs a value: %s", o->name, o->metavar);
            value = argv[++i];
        }
        osdp_status s = set_value(o, value, job);
        if (s != OSDP_OK) return s;
        job->given[row] = 1;
    }
    if (i < argc)
        return osdp_error_set(OSDP_ERR_INPUT, "%s: unexpected argument '%s' (see osdp_gpt %s --help)", cmd, argv[i], cmd);
    if (job->hierarchical && job->no_hierarchical)
        return osdp_error_set(OSDP_ERR_INPUT, "%s: --hierarchical and --no-hierarchical contradict each other: give one",
                              cmd);
    for (int r = 0; r < N_OPTIONS; r++)
        if ((g_options[r].required & command) && !job->given[r])
            return osdp_error_set(OSDP_ERR_INPUT, "%s: --%s %s is required", cmd, g_options[r].name, g_options[r].metavar);
    return OSDP_OK;
}

int osdp_option_given(const osdp_job *job, const char *name)
{
    for (int i = 0; i < N_OPTIONS; i++)
        if (job->given[i] && strcmp(g_options[i].name, name) == 0) return 1;
    return 0;
}

/* the default as --help shows it: the table's text, else the value a job
 * without options holds */
static void default_text(const option_row *o, const osdp_job *defaults, char *buf, size_t n)
{
    buf[0] = 0;
    const char *at = (const char *)defaults + o->field;
    if (o->default_text) snprintf(buf, n, "%s", o->default_text);
    else if (o->type == OPT_INT && o->choices && *(const long long *)at == o->word_value) snprintf(buf, n, "%s", o->choices);
    else if ((o->type == OPT_INT || o->type == OPT_SIZE) && (*(const long long *)at || o->default_value))
        snprintf(buf, n, "%lld", *(const long long *)at);
    else if (o->type == OPT_FLOAT && (*(const double *)at || o->default_value)) snprintf(buf, n, "%g", *(const double *)at);
    else if (o->type == OPT_ENUM && o->default_value) snprintf(buf, n, "%s", o->default_value);
    else if (o->type == OPT_TEXT && o->default_value)
        snprintf(buf, n, "%s%s", strncmp(o->default_value, "input:", 6) == 0 ? "input/" : "",
                 strncmp(o->default_value, "input:", 6) == 0 ? o->default_value + 6 : o->default_value);
}

void osdp_options_usage(osdp_command command, FILE *out)
{
    static const char *const synopsis[] = {
        [OSDP_CMD_TRAIN] = "usage: osdp_gpt train [options]        (under mpiexec / srun for N ranks)",
        [OSDP_CMD_PLAN] = "usage: osdp_gpt plan --model FILE --device FILE --ranks N [options]     (one process)",
        [OSDP_CMD_PROFILE] = "usage: mpiexec -n N osdp_gpt profile --model FILE --out FILE [options]     (N >= 2,\n"
                             "       or N = 1 with --device FILE)\n"
                             "  measures alpha/beta (all-gather, reduce-scatter over the N ranks; NCCL with --backend\n"
                             "  cuda) and gamma per operator type (forward + backward of the model's operators; CUDA\n"
                             "  events with --backend cuda), and mem_limit (the GPU's free memory after NCCL's\n"
                             "  warm-up, less a margin, with --backend cuda), writes a device file",
        [OSDP_CMD_SAMPLE] = "usage: osdp_gpt sample --ckpt FILE [options]     (any number of ranks: mpiexec -n N)\n"
                            "  generates text from a checkpoint's weights (rank 0 generates and prints it to stdout)",
        [OSDP_CMD_EVAL] = "usage: osdp_gpt eval (--ckpt FILE | --init-from WEIGHTS) (--data | --val-data) FILE|DIR [options]\n"
                          "  the loss and perplexity of the weights on the data (any rank count and mesh): with\n"
                          "  --batches K, train's validation loss for the same batches, bit for bit on the same mesh",
    };
    osdp_job defaults;
    job_defaults(command, &defaults);
    fprintf(out, "%s\n", synopsis[command]);
    for (int i = 0; i < N_OPTIONS; i++) {
        const option_row *o = &g_options[i];
        if (!(o->commands & command)) continue;
        char head[64], range[160] = "", dflt[160];
        snprintf(head, sizeof head, "--%s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
        fprintf(out, "  %-22s", head);
        if (strlen(head) > 22) fprintf(out, "\n  %-22s", "");
        for (const char *p = o->help; *p; p++) {
            fputc(*p, out);
            if (*p == '\n') fprintf(out, "  %-22s", "");
        }
        fprintf(out, "\n");
        if (o->type == OPT_INT || o->type == OPT_SIZE || o->type == OPT_FLOAT) {
            char r[64];
            range_text(o, r, sizeof r);
            snprintf(range, sizeof range, "%s %s%s%s", o->type == OPT_FLOAT ? "a number in" : o->type == OPT_SIZE
                     ? "bytes in" : "an integer in", r, o->choices ? " or " : "", o->choices ? o->choices : "");
        }
        default_text(o, &defaults, dflt, sizeof dflt);
        const char *required = o->required & command ? "required" : NULL;
        if (range[0] || dflt[0] || required)
            fprintf(out, "  %-22s(%s%s%s%s)\n", "", range, range[0] && (dflt[0] || required) ? "; " : "",
                    required ? required : dflt[0] ? "default " : "", required ? "" : dflt);
    }
    fprintf(out, "  --help                this text (exit 0)\n");
}

osdp_status osdp_job_check_seq_len(const osdp_job *job, int ctx)
{
    if (job->seq_len > ctx)
        return osdp_error_set(OSDP_ERR_INPUT, "--seq-len %lld: above the model's ctx = %d (%s)", job->seq_len, ctx,
                              job->model ? job->model : "the model of the weights file");
    return OSDP_OK;
}

/* one of --attention / --head: whether the naive path runs */
static osdp_status kernel_choice(const osdp_job *job, const char *option, int choice, int backend_has, int *naive)
{
    if (choice == OSDP_KERNEL_NAIVE || backend_has) {
        *naive = choice == OSDP_KERNEL_NAIVE;
        return OSDP_OK;
    }
    if (osdp_option_given(job, option))
        return osdp_error_set(OSDP_ERR_INPUT, "--%s %s: the %s backend has no such kernels yet (use --%s naive)", option,
                              osdp_option_word(option, choice), osdp_option_word("backend", job->backend), option);
    *naive = 1;
    return OSDP_OK;
}

osdp_status osdp_job_apply_kernels(const osdp_job *job, const struct osdp_compute_backend *be, osdp_model_config *cfg)
{
    osdp_status s = kernel_choice(job, "attention", job->attention, !be || be->attention_forward_tiled,
                                  &cfg->attention_naive);
    if (s == OSDP_OK) s = kernel_choice(job, "head", job->head, !be || be->crossentropy_lse, &cfg->head_naive);
    return s;
}
