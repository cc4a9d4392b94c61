/* The mesh's tensor-parallel degree (osdp/planner.h, osdp_planner_mesh):
 * one scheduler run per candidate T on the layout of one rank's parts. */
#include "osdp/planner.h"
#include "osdp/cost_model.h"

#include <stdio.h>
#include <string.h>

void osdp_mesh_choice_free(osdp_mesh_choice *mesh)
{
    if (!mesh) return;
    if (mesh->best >= 0) {
        osdp_planner_result_free(&mesh->result);
        osdp_layout_free(&mesh->layout);
    }
    mesh->best = -1;
}

/* Why T cannot be the tensor-parallel degree of N ranks on dev ("" when it
 * can, as far as the ranks and the node tell; the heads are the layout's
 * to check) */
static void exclusion(int tp, int n_ranks, const osdp_device *dev, char *why, size_t n)
{
    why[0] = '\0';
    if (tp < 1)
        snprintf(why, n, "--tp %d: the tensor-parallel degree must be at least 1", tp);
    else if (n_ranks % tp != 0)
        snprintf(why, n, "--tp %d does not divide the %d ranks (--ranks): the mesh is N = T x D", tp, n_ranks);
    else
        osdp_planner_tp_node_why(tp, dev, why, n);
}

int osdp_planner_tp_node_why(int tp, const osdp_device *dev, char *why, size_t n)
{
    const int node = dev->ranks_per_node;
    why[0] = '\0';
    if (!osdp_cost_tp_spans_nodes(node, tp)) return 0;
    if (tp > node)
        snprintf(why, n, "--tp %d exceeds the node size of %d ranks (ranks_per_node of device %s): a tensor-parallel "
                 "group must sit inside one node", tp, node, dev->name);
    else
        snprintf(why, n, "--tp %d does not divide the node size of %d ranks (ranks_per_node of device %s): a "
                 "tensor-parallel group of %d consecutive ranks would straddle two nodes, and must sit inside one",
                 tp, node, dev->name, tp);
    return 1;
}

/* plans candidate c; on OSDP_OK with a plan, *layout and *res hold it (the
 * caller frees them) */
static osdp_status plan_candidate(const osdp_model_config *cfg, int seq_len, const osdp_device *dev,
                                  const osdp_planner_options *o, osdp_tp_candidate *c, osdp_layout *layout,
                                  osdp_planner_result *res)
{
    osdp_status s = osdp_layout_build_tp(layout, cfg, seq_len, c->geo.tp_size, o->vocab_quantum);
    if (s != OSDP_OK) {
        snprintf(c->excluded, sizeof c->excluded, "%s", osdp_error_message());
        return s;
    }
    osdp_planner_options per_mesh = *o;
    per_mesh.geo.n_ranks = c->geo.n_ranks;   /* the planner's ranks: the data-parallel group of one rank's parts */
    osdp_cost_hierarchy hier;   /* plan mode h at this mesh's levels, when offered and the group spans nodes */
    if (!per_mesh.hierarchy) per_mesh.hierarchy = osdp_planner_hierarchy(o, dev, c->geo.tp_size, c->geo.n_ranks, 1, &hier);
    osdp_device level;   /* two-level network: the data-parallel group's collectives at its level */
    osdp_cost_device_for_mesh(dev, c->geo.tp_size, c->geo.n_ranks, 1, &level);
    c->status = osdp_planner_run(layout, &level, &per_mesh, res);
    if (c->status == OSDP_OK) {
        res->plan.geo.tp_size = c->geo.tp_size;
        c->step_s = res->step_s;
        c->samples_per_s = res->samples_per_s;
        c->peak_bytes = res->peak_bytes;
        c->geo.micro_batch = res->plan.geo.micro_batch;
        c->geo.accum_steps = res->plan.geo.accum_steps;
    } else {
        osdp_planner_result_free(res);
        osdp_layout_free(layout);
    }
    return c->status;
}

osdp_status osdp_planner_mesh(const osdp_model_config *cfg, int seq_len, const osdp_device *dev,
                              const osdp_planner_options *o, int tp, osdp_mesh_choice *mesh)
{
    memset(mesh, 0, sizeof *mesh);
    mesh->best = -1;
    const int N = o->geo.n_ranks;
    if (N < 1) return osdp_error_set(OSDP_ERR_INPUT, "planner: ranks must be at least 1 (got %d)", N);
    if (tp != OSDP_TP_AUTO) {
        osdp_tp_candidate *c = &mesh->cand[0];
        mesh->n_candidates = 1;
        c->geo.tp_size = tp;
        exclusion(tp, N, dev, c->excluded, sizeof c->excluded);
        if (c->excluded[0]) return osdp_error_set(OSDP_ERR_INPUT, "%s", c->excluded);
        c->geo.n_ranks = N / tp;
        osdp_status s = plan_candidate(cfg, seq_len, dev, o, c, &mesh->layout, &mesh->result);
        if (s == OSDP_OK) mesh->best = 0;
        return s;
    }
    osdp_status first_failure = OSDP_OK;
    char first_message[2048] = "";
    for (int t = 1; t <= N && mesh->n_candidates < OSDP_MAX_TP_CANDIDATES; t++) {
        if (N % t != 0) continue;
        osdp_tp_candidate *c = &mesh->cand[mesh->n_candidates++];
        c->geo.tp_size = t;
        c->geo.n_ranks = N / t;
        exclusion(t, N, dev, c->excluded, sizeof c->excluded);
        if (c->excluded[0]) continue;
        osdp_layout layout;
        osdp_planner_result res;
        osdp_status s = plan_candidate(cfg, seq_len, dev, o, c, &layout, &res);
        if (c->excluded[0]) {   /* the layout refused T (the heads), or failed */
            if (s != OSDP_ERR_INPUT) return s;
            continue;
        }
        if (s != OSDP_OK) {
            if (s != OSDP_ERR_INFEASIBLE) return s;
            if (first_failure == OSDP_OK) {
                first_failure = s;
                snprintf(first_message, sizeof first_message, "%s", osdp_error_message());
            }
            continue;
        }
        if (mesh->best < 0 || c->samples_per_s > mesh->cand[mesh->best].samples_per_s) {
            osdp_mesh_choice_free(mesh);
            mesh->best = (int)(c - mesh->cand);
            mesh->layout = layout;
            mesh->result = res;
        } else {
            osdp_planner_result_free(&res);
            osdp_layout_free(&layout);
        }
    }
    if (mesh->best >= 0) return OSDP_OK;
    if (first_failure != OSDP_OK) return osdp_error_set(first_failure, "%s", first_message);
    return osdp_error_set(OSDP_ERR_INPUT, "--tp auto: no tensor-parallel degree divides the %d ranks, the model's heads "
                          "and fits a node of the device (T = 1 always does unless the model is refused)", N);
}
