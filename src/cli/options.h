/* The command line of osdp_gpt: one table of options (name, value type,
 * range, default, help, which commands take it) that `train`, `plan` and
 * `profile` share, and the one resolved job description it produces.
 *
 * Adding an option is one row in the table of options.c (and a field here
 * when the value needs a place of its own).  Every value is checked by the
 * one rule of its type: integers refuse fractions, trailing junk, overflow
 * and anything outside [lo, hi]; sizes take a K/M/G/T suffix and must come
 * to a whole number of bytes in range; floats must be finite and in range;
 * enumerations must be one of their words.  Every message names the option
 * and what it accepts.  Parsing never touches argv and never prints: under
 * MPI every rank parses the same argv to the same answer, and the caller
 * prints the error once (rank 0) while every rank exits non-zero. */
#ifndef OSDP_CLI_OPTIONS_H
#define OSDP_CLI_OPTIONS_H

#include <stdio.h>
#include "osdp/dtype.h"
#include "osdp/error.h"
#include "osdp/model_config.h"

typedef enum osdp_command { OSDP_CMD_TRAIN = 1, OSDP_CMD_PLAN = 2, OSDP_CMD_PROFILE = 4, OSDP_CMD_SAMPLE = 8,
               OSDP_CMD_EVAL = 16 } osdp_command;

/* the words of the enumerated options, in the order of their values */
typedef enum osdp_recompute_choice { OSDP_RECOMPUTE_NONE, OSDP_RECOMPUTE_ALL, OSDP_RECOMPUTE_AUTO } osdp_recompute_choice;
/* --attention tiled|naive, --head fused|naive: the lean path, or the reference */
typedef enum osdp_kernel_choice { OSDP_KERNEL_LEAN, OSDP_KERNEL_NAIVE } osdp_kernel_choice;
typedef enum osdp_backend_choice { OSDP_BACKEND_CPU, OSDP_BACKEND_CUDA } osdp_backend_choice;
typedef enum osdp_precision_choice { OSDP_PRECISION_BF16, OSDP_PRECISION_FP32 } osdp_precision_choice;
typedef enum osdp_residual_choice { OSDP_RESIDUAL_FP32, OSDP_RESIDUAL_BF16 } osdp_residual_choice;
typedef enum osdp_on_write_error { OSDP_ON_WRITE_ERROR_STOP, OSDP_ON_WRITE_ERROR_CONTINUE } osdp_on_write_error;
/* --cost-model and --search take the values of osdp_cost_kind and
 * osdp_search_kind (paper|overlap, exact|dfs) */

#define OSDP_SPLIT_AUTO (-1)          /* --split auto */
#define OSDP_TP_AUTO 0                /* --tp auto: the planner chooses the tensor-parallel degree */
#define OSDP_PP_AUTO 0                /* --pp auto: the 3D search chooses the pipeline stages */
#define OSDP_MAX_TP 4096              /* --tp: the largest (it must divide the heads anyway) */
#define OSDP_PROFILE_MAX_REPS 64      /* profile --reps: the largest */
#define OSDP_MAX_OPTIONS 96           /* rows of the table (checked at start) */

/* One resolved job: every option's value, defaults applied. */
typedef struct osdp_job {
    osdp_command command;
    int help;                         /* --help: print the usage and exit 0 */
    /* files */
    const char *model, *data, *device, *plan, *log, *dump_weights, *out, *name;
    const char *val_data;             /* validation data; NULL: --data's val shards, if any */
    long long eval_every;             /* 0: not given (evaluate at the end only) */
    long long eval_batches;           /* validation batches of the global batch's size (eval --batches; 0: all the data) */
    /* what to run */
    long long steps;                  /* total optimizer steps (a resume continues up to it) */
    long long batch;                  /* sequences per rank per micro-step; 0: not given */
    long long global_batch;           /* sequences per optimizer step; 0: not given */
    long long max_batch;              /* plan: the scheduler's largest micro-batch */
    long long seq_len;                /* tokens per sequence; 0: the model's ctx */
    long long ranks;                  /* plan: ranks to plan for */
    long long split;                  /* slices per operator, or OSDP_SPLIT_AUTO */
    long long tp;                     /* tensor-parallel degree (1: none), or OSDP_TP_AUTO */
    long long pp;                     /* pipeline stages (1: none), or OSDP_PP_AUTO */
    const char *stages;               /* train --stages: "0:13,13:26,..."; NULL: balanced by the cost model */
    int pipe_schedule;                /* train --schedule: osdp_pipe_schedule (1f1b|gpipe|interleaved) */
    long long virtual_stages;         /* --virtual-stages V: model chunks per stage (interleaved) */
    int recompute;                    /* osdp_recompute_choice */
    int grad_reduce;                  /* --grad-reduce: osdp_grad_reduce (every|auto|once) */
    int attention;                    /* osdp_kernel_choice: tiled|naive */
    int head;                         /* osdp_kernel_choice: fused|naive */
    int cost_model;                   /* osdp_cost_kind */
    int search;                       /* osdp_search_kind */
    double dfs_limit;                 /* seconds */
    int json;
    long long mem_limit;              /* bytes per rank; 0: not given */
    int no_prefetch;
    int hierarchical;                 /* --hierarchical: given (the planner offers plan mode h anyway) */
    int no_hierarchical;              /* --no-hierarchical: the planner never offers plan mode h */
    /* optimizer */
    long long seed;
    double lr, min_lr_frac, weight_decay, grad_clip;
    long long warmup, lr_steps;       /* lr_steps 0: not given (the cosine horizon follows --steps) */
    /* the machine */
    long long threads;                /* 0: node cores / ranks on the node */
    int backend;                      /* osdp_backend_choice */
    int precision;                    /* osdp_precision_choice (when given) */
    int residual_dtype;               /* osdp_residual_choice */
    int activation_dtype;             /* osdp_residual_choice's words: fp32|bf16 */
    double peak_flops;                /* 0: measured */
    long long reps;                   /* profile: repetitions */
    long long ranks_per_node;         /* --ranks-per-node: emulated node size (0: not given) */
    const char *emulate_link;         /* --emulate-link BANDWIDTH,LATENCY (NULL: not given) */
    long long nodes;                  /* plan --nodes: the ranks' nodes (0: not given) */
    int quiet;
    long long log_every;              /* the progress line every N steps */
    /* checkpoints */
    const char *ckpt_dir, *resume_file, *init_from;
    long long save_every, keep;
    int resume, resume_fallback;
    int on_write_error;               /* osdp_on_write_error: a failed save or --log write */
    /* sampling (osdp_gpt sample; train --sample-every) */
    const char *ckpt;                 /* sample, eval: the checkpoint or weights file */
    const char *prompt, *prompt_ids;  /* NULL: not given */
    const char *tokenizer;            /* a token table (llm.c tokenizer format); NULL: none */
    long long tokens;                 /* sample: tokens to generate */
    double temperature;               /* 0: greedy */
    long long top_k;                  /* 0: not given (the whole vocabulary) */
    long long sample_every;           /* train: a sample after every N-th step; 0: none */
    long long sample_tokens;          /* train: tokens per sample */
    /* which options the command line gave, by table row */
    unsigned char given[OSDP_MAX_OPTIONS];
} osdp_job;

/* Parse the arguments of `command` (argv[0] is the command's name) into
 * *job, defaults first.  OSDP_ERR_INPUT with a message naming the option on
 * a bad value, an unknown option, a missing value or a missing required
 * option.  --help sets job->help and stops there (OSDP_OK). */
osdp_status osdp_options_parse(osdp_command command, int argc, char *const *argv, osdp_job *job);

/* Was option `name` ("lr-steps", without the dashes) on the command line? */
int osdp_option_given(const osdp_job *job, const char *name);

/* `osdp_gpt COMMAND --help`: every option of the command with its range and
 * default. */
void osdp_options_usage(osdp_command command, FILE *out);

/* --attention and --head into the model description's attention_naive and
 * head_naive (osdp/model_config.h).  Not given, the lean path runs where the
 * backend has its kernels (be NULL: plan, which plans for the CPU's) and the
 * naive one elsewhere; asked of a backend without them, OSDP_ERR_INPUT names
 * the option. */
struct osdp_compute_backend;
osdp_status osdp_job_apply_kernels(const osdp_job *job, const struct osdp_compute_backend *be, osdp_model_config *cfg);

/* --seq-len against the model's ctx (the table knows no model) */
osdp_status osdp_job_check_seq_len(const osdp_job *job, int ctx);

/* the name of the command, "train" */
const char *osdp_command_name(osdp_command command);
/* the working weights of --precision: by default bf16 with cuda, fp32 on the cpu */
osdp_dtype osdp_job_weights(const osdp_job *job);
/* the residual stream of --residual-dtype into *out; bf16 needs bf16 weights (OSDP_ERR_INPUT naming the
 * option and weights_from, where the weights came from, e.g. "--precision fp32") */
osdp_status osdp_job_residual(const osdp_job *job, osdp_dtype weights, const char *weights_from, osdp_dtype *out);
/* --activation-dtype into cfg->act_bf16 (osdp/layout.h): bf16 only beside bf16 weights, OSDP_ERR_INPUT as
 * osdp_job_residual's otherwise */
osdp_status osdp_job_activations(const osdp_job *job, osdp_dtype weights, const char *weights_from,
                                 osdp_model_config *cfg);
/* the word of an enumerated option's value: osdp_option_word("recompute", 2) = "auto" */
const char *osdp_option_word(const char *name, int value);

#endif
