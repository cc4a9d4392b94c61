/* osdp_gpt eval: the loss and perplexity of a checkpoint's or weights file's
 * weights on data, on any rank count and mesh.
 *
 * eval is not a second evaluator: osdp_cmd_train sets up the mesh, the plan
 * and the runtime as for training (the same options, the model the weights
 * file holds), loads the weights as --init-from does, and runs train's
 * validation (cli/validation.h) in place of the steps.  So --batches K gives
 * train's validation loss for the same batches (--eval-batches K), bit for
 * bit on the same mesh; without --batches, every sequence of the data once.
 * --ckpt FILE takes the batch geometry (global batch, sequence length) of
 * the run that saved it unless the options say otherwise; --init-from
 * WEIGHTS takes train's defaults for a fresh run. */
#ifndef OSDP_CLI_EVAL_H
#define OSDP_CLI_EVAL_H

#include "osdp/checkpoint.h"
#include "osdp/mesh.h"
#include "options.h"
#include "validation.h"

/* eval's cross-option rules: one of --ckpt and --init-from */
osdp_status osdp_eval_check_options(const osdp_job *job);
/* the weights to evaluate (--ckpt or --init-from), and the option that named them */
const char *osdp_eval_weights(const osdp_job *job);
const char *osdp_eval_weights_option(const osdp_job *job);
/* the root attributes of the weights file (collective over the world), and
 * the model it holds (this rank alone); errors name the option */
osdp_status osdp_eval_peek(const osdp_job *job, osdp_ckpt_info *info);
osdp_status osdp_eval_model(const osdp_job *job, osdp_model_config *cfg);
/* Collective: evaluates the runtime's weights (loaded from `loaded`'s file)
 * on the prepared validation set; rank 0 prints the loss and perplexity
 * (and writes the --log record).  Every rank returns the same status. */
osdp_status osdp_eval_run(osdp_validation *v, osdp_runtime *rt, const osdp_job *job, const osdp_ckpt_info *loaded,
                          const osdp_mesh *mesh);

#endif
