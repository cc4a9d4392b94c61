/* Lower bounds on a pipeline's step for the 3D search (src/planner/planner_3d_bound.h). */
#include "planner_3d_bound.h"
#include "osdp/cost_model.h"
#include "plan_context.h"

#include <math.h>
#include <string.h>

int osdp_3d_schedule_bounded(osdp_pipe_schedule schedule)
{
    switch (schedule) {
    case OSDP_PIPE_1F1B:
    case OSDP_PIPE_GPIPE: return 1;
    default: return 0;   /* a schedule of other pass orders needs its own bound */
    }
}

osdp_status osdp_3d_op_times(const osdp_layout *layout, const osdp_device *dev, const osdp_planner_options *o, int tp,
                             int dp, int pp, int b, int M, double *op_s, double *sync_s)
{
    osdp_device level;   /* as osdp_planner_pipeline prices the mesh */
    osdp_cost_device_for_mesh(dev, tp, dp, pp, &level);
    osdp_planner_options om = *o;
    om.geo.n_ranks = dp;
    osdp_cost_hierarchy hier;
    om.hierarchy = osdp_planner_hierarchy(o, dev, tp, dp, pp, &hier);
    om.global_batch = 0;
    om.geo.micro_batch = b;
    om.stage_in_flight = 0;
    om.stage_buffer_bytes = 0;
    om.stage_next_passes = 0;
    osdp_status s = osdp_ps_fastest_times(layout, &level, &om, b, M, op_s);
    if (s != OSDP_OK) return s;
    for (int i = 0; i < layout->n_ops; i++) op_s[i] /= M;
    *sync_s = osdp_cost_step_sync_time(&level, tp, dp, pp);
    return OSDP_OK;
}

double osdp_3d_step_bound(const double *op_s, int n_ops, int P, int M)
{
    double W = 0, largest = 0;
    for (int i = 0; i < n_ops; i++) {
        W += op_s[i];
        if (op_s[i] > largest) largest = op_s[i];
    }
    const double spread = 1 - pow(1 - 1.0 / M, P);   /* 1 / M at P = 1: the bound is M W */
    const double any_split = spread > 0 ? W / spread : (double)M * W;
    return fmax(any_split, (double)M * largest);
}

double osdp_3d_chunks_bound(const double *op_s, int n_ops, int P, int M)
{
    double W = 0, largest = 0;
    for (int i = 0; i < n_ops; i++) {
        W += op_s[i];
        if (op_s[i] > largest) largest = op_s[i];
    }
    return (double)M * fmax(W / P, largest);
}

double osdp_3d_split_bound(const double *op_s, const int *bounds, int P, int M)
{
    double before = 0, most = 0;
    for (int s = 0; s < P; s++) {
        double c = 0;
        for (int i = bounds[s]; i < bounds[s + 1]; i++) c += op_s[i];
        most = fmax(most, before + (double)M * c);
        before += c;
    }
    return most;
}
