/* osdp_gpt sample: text from a checkpoint's weights, on any number of ranks.
 *
 * The ranks load the checkpoint as training would (a runtime over the world
 * with an all-ZDP plan, so each rank holds 1/N of the weights; any rank
 * count, any file: a training checkpoint or a weights file), gather the
 * operators' weights to rank 0 (src/cli/sampler.h), and rank 0 generates
 * (with the node's cores) and prints while the others sleep at a final
 * barrier.  The text depends on the checkpoint, the prompt and the
 * settings only: not on the rank count.  stdout gets the text alone (the
 * prompt, then what follows it); rank 0 says what it ran on stderr. */
#include "config.h"
#include "cli/app.h"
#include "osdp/checkpoint.h"
#include "osdp/comm.h"
#include "osdp/compute.h"
#include "osdp/layout.h"
#include "osdp/plan.h"
#include "osdp/runtime.h"
#include "options.h"
#include "sample_text.h"
#include "sampler.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* a checkpoint's error, with the option that named the file */
static osdp_status blame_ckpt_option(osdp_status s)
{
    if (s == OSDP_OK) return s;
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", osdp_error_message());
    return osdp_error_set(s, "--ckpt: %s", msg);
}

/* a runtime over the world holding the checkpoint's weights, 1/N per rank */
static osdp_status load_weights(osdp_runtime *rt, osdp_plan *plan, osdp_comm *comm, const osdp_layout *layout,
                                const osdp_model_config *cfg, const char *path, osdp_ckpt_info *info)
{
    const osdp_compute_backend *cpu = &osdp_compute_cpu;
    int pad_quantum = 1;
    osdp_status s = osdp_compute_pad_quantum(cpu, &pad_quantum);
    if (s == OSDP_OK) s = osdp_plan_alloc(plan, layout->n_ops);
    if (s != OSDP_OK) return s;
    osdp_plan_fill(plan, 1);
    (void)osdp_plan_tie_embedding(plan, layout);
    plan->geo.micro_batch = plan->geo.accum_steps = 1;
    s = osdp_comm_create_mpi(comm, &(MPI_Comm){MPI_COMM_WORLD});
    if (s != OSDP_OK) return s;
    osdp_runtime_options opt = {.geo.micro_batch = 1, .geo.accum_steps = 1, .geo.weight_dtype = OSDP_FLOAT32,
                                .geo.pad_quantum = pad_quantum};
    osdp_optim_defaults(&opt.optim);
    s = osdp_runtime_create(rt, layout, plan, comm, cpu, &opt);
    if (s != OSDP_OK) return s;
    return blame_ckpt_option(osdp_ckpt_load(rt, cfg, path, OSDP_CKPT_WEIGHTS_ONLY, MPI_COMM_WORLD, info));
}

int osdp_cmd_sample(const osdp_job *job)
{
    osdp_world world;
    osdp_world_init(&world, (int)job->threads);
    osdp_model_config cfg;
    osdp_check_all(blame_ckpt_option(osdp_ckpt_read_model(job->ckpt, MPI_COMM_WORLD, &cfg)));
    if (job->top_k > cfg.vocab)
        osdp_check_all(osdp_error_set(OSDP_ERR_INPUT, "--top-k %lld: above the model's vocabulary of %d tokens", job->top_k,
                                      cfg.vocab));
    osdp_sample_text text;
    int *prompt = NULL, n_prompt = 0;
    osdp_status s = osdp_sample_text_open(&text, job, cfg.vocab);
    if (s == OSDP_OK) s = osdp_sample_text_prompt(&text, job, &prompt, &n_prompt);
    osdp_check_all(s);
    osdp_check_all(osdp_compute_cpu.init(world.local_rank, world.threads));

    osdp_layout layout;   /* the runtime only holds weights: activations for one token */
    osdp_check_all(osdp_layout_build(&layout, &cfg, 1));
    osdp_runtime rt;
    osdp_plan plan;
    osdp_comm comm;
    osdp_ckpt_info info;
    osdp_check_all(load_weights(&rt, &plan, &comm, &layout, &cfg, job->ckpt, &info));
    osdp_sampler sm;
    osdp_check_all(osdp_sampler_init(&sm, &cfg, world.rank == 0));
    osdp_check_all(osdp_sampler_gather(&sm, &rt, MPI_COMM_WORLD));
    osdp_runtime_destroy(&rt);   /* rank 0 has the weights: the shards are done with */
    osdp_comm_destroy(&comm);
    osdp_plan_free(&plan);

    osdp_sample_settings settings = {.tokens = (int)job->tokens, .temperature = job->temperature,
                                     .top_k = (int)job->top_k, .seed = (uint64_t)job->seed};
    if (world.rank == 0) {
        char top_k[32] = "the whole vocabulary", step[48] = "a weights file";
        if (job->top_k) snprintf(top_k, sizeof top_k, "%lld", job->top_k);
        if (!info.weights_only) snprintf(step, sizeof step, "step %ld", info.step);
        fprintf(stderr, "sample: %s (model %s, %s), %d prompt tokens + %d, temperature %g, top-k %s, seed %lld, %d rank%s\n",
                job->ckpt, cfg.name, step, n_prompt, settings.tokens, settings.temperature, top_k, job->seed, world.size,
                world.size == 1 ? "" : "s");
        /* the other ranks sleep while rank 0 generates: without --threads it
         * takes the node's cores (the kernels give the same bits on any
         * thread count, so the text does not change) */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        if (!job->threads && cores > world.threads) osdp_compute_cpu.init(world.local_rank, (int)cores);
        int *out = malloc((size_t)settings.tokens * sizeof *out);
        s = out ? osdp_sampler_generate(&sm, prompt, n_prompt, &settings, out)
                : osdp_error_set(OSDP_ERR_OOM, "sample: out of host memory");
        if (s != OSDP_OK) osdp_fatal(s, osdp_error_message());
        if (!text.decodes)
            fprintf(stderr, "sample: no --tokenizer for a vocabulary of %d tokens (not bytes): printing token ids, the "
                    "prompt's first\n", cfg.vocab);
        osdp_sample_text_write(&text, prompt, n_prompt, stdout);
        if (!text.decodes) fputc(' ', stdout);
        osdp_sample_text_write(&text, out, settings.tokens, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        free(out);
    }
    osdp_sampler_wait(MPI_COMM_WORLD);
    osdp_sampler_free(&sm);
    osdp_sample_text_close(&text);
    free(prompt);
    osdp_layout_free(&layout);
    MPI_Finalize();
    return 0;
}
