/* A GPT model description, read from an INI file in input/models/.
 *
 *   [model]
 *   name    = tiny
 *   n_layer = 4            ; L blocks
 *   n_head  = 4            ; heads per block (must divide every block width)
 *   n_embd  = 128          ; width of every block unless `widths` is given
 *   vocab   = 256
 *   ctx     = 64           ; maximum sequence length T
 *   widths  = 1024,2048    ; optional, one width per block ("inconsistent &
 *                          ; consecutive" models); see osdp/layout.h for how
 *                          ; blocks of different widths connect.
 *       4096, 1024         ; indented lines continue the list (any number of
 *                          ; blocks: a line holds at most 198 characters)
 *   tied_head = true       ; optional (default false): the LM head has no
 *                          ; weight of its own, its logits are x wte^T
 *                          ; (GPT-2's tying); needs the embedding width
 *                          ; (block 0's) to equal the last block's */
#ifndef OSDP_MODEL_CONFIG_H
#define OSDP_MODEL_CONFIG_H

#include "osdp/error.h"

#define OSDP_MAX_LAYERS 1024

typedef struct osdp_model_config {
    char name[64];
    int n_layer;
    int n_head;
    int n_embd;
    int vocab;
    int ctx;
    int width[OSDP_MAX_LAYERS];   /* width of block i (all n_embd unless `widths`) */
    int tied_head;                /* 1: the head's product reads the embedding's wte (osdp/layout.h) */
    char text[8192];              /* the description as read, stored in checkpoints */
    /* How the operators compute, not what the model is: neither read from the INI nor hashed nor
     * checkpointed.  0 (the default) is the memory-lean path; --attention naive / --head naive
     * set 1, the reference the tests compare against (osdp/layout.h says what each keeps). */
    int attention_naive;          /* 1: attention keeps its (NH, T, T) probabilities; 0: tiled, an lse per row */
    int head_naive;               /* 1: the head keeps its (T, V) probabilities; 0: fused, logits in chunks */
    int act_bf16;                 /* 1 (--activation-dtype bf16, bf16 weights only): the activations the
                                     backward reads around the products (ln, qkv, heads, fc, gelu) are stored
                                     in bf16 (osdp/layout.h) */
} osdp_model_config;

osdp_status osdp_model_config_load(osdp_model_config *cfg, const char *path);
osdp_status osdp_model_config_parse(osdp_model_config *cfg, const char *text, const char *origin);
/* 64-bit hash of the semantic content (for cross-rank and checkpoint checks) */
unsigned long long osdp_model_config_hash(const osdp_model_config *cfg);

#endif
