/* Emulated nodes and link (osdp/link_emulation.h): the option parsing, the
 * floor, and the wrapper that the collective wrappers of comm.c call. */
#include "osdp/link_emulation.h"
#include "comm_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A communicator's view of the emulated nodes: set when its group spans
 * more than one node and a link is emulated */
typedef struct link_pending {
    void *request;
    double deadline;    /* when its floor ends; NAN: not started (a collective of a backend that moves data only
                           inside its calls, started at this rank's next wait or blocking collective) */
    double floor_s;
} link_pending;

struct osdp_comm_link {
    int *node_of;              /* (size) the emulated node of each rank of the group */
    link_pending *pending;     /* non-blocking calls not yet waited, with the time their floor ends */
    int n_pending, cap_pending;
    double busy_until;         /* when the floor of this rank's last message on the group ends: the next one's starts */
};

static osdp_link_emulation g_emulation;   /* ranks_per_node 0: none */
/* when the floor of this rank's last collective over the link ends, whatever its communicator: a ring uses
 * both directions of the rank's link, so two collectives at once (a data group's prefetched all-gather and
 * the node-first reduction's cross reduce-scatter) share it and take the sum, as the cost model prices them */
static double g_collectives_busy_until;
/* the collectives whose floor has not started, in the order they were issued: (communicator's link, request) */
typedef struct link_unstarted { struct osdp_comm_link *link; void *request; } link_unstarted;
static link_unstarted *g_unstarted;
static int g_n_unstarted, g_cap_unstarted;

void osdp_comm_emulate(const osdp_link_emulation *e)
{
    if (e) g_emulation = *e;
    else memset(&g_emulation, 0, sizeof g_emulation);
    g_collectives_busy_until = 0;
    g_n_unstarted = 0;
}

const osdp_link_emulation *osdp_comm_emulation(void)
{
    return g_emulation.ranks_per_node > 0 ? &g_emulation : NULL;
}

/* ---- the options ---- */

/* "12.5G": bytes per second, decimal suffixes */
static int parse_bandwidth(const char *text, size_t len, double *out)
{
    char buf[64];
    if (len == 0 || len >= sizeof buf) return -1;
    memcpy(buf, text, len);
    buf[len] = 0;
    char *end;
    errno = 0;
    double x = strtod(buf, &end);
    if (errno || end == buf) return -1;
    static const char suffix[] = "KMGT";
    const char *at = *end ? strchr(suffix, *end) : NULL;
    if (at && *at) {
        x *= pow(1000.0, (double)(at - suffix + 1));
        end++;
    }
    if (*end || !isfinite(x) || x <= 0) return -1;
    *out = x;
    return 0;
}

/* "5us": seconds, a unit required */
static int parse_latency(const char *text, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(text, &end);
    if (errno || end == text || !isfinite(x) || x < 0) return -1;
    static const struct { const char *unit; double scale; } units[] = {{"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(end, units[i].unit) == 0) {
            *out = x * units[i].scale;
            return 0;
        }
    return -1;
}

osdp_status osdp_link_emulation_parse(osdp_link_emulation *e, long long ranks_per_node, const char *link,
                                      int world_size)
{
    memset(e, 0, sizeof *e);
    if (link && ranks_per_node <= 0)
        return osdp_error_set(OSDP_ERR_INPUT, "--emulate-link %s needs --ranks-per-node R (which ranks share an "
                              "emulated node)", link);
    if (ranks_per_node <= 0) return OSDP_OK;
    if (world_size % ranks_per_node != 0)
        return osdp_error_set(OSDP_ERR_INPUT, "--ranks-per-node %lld does not divide the %d ranks: the emulated nodes "
                              "hold R ranks each", ranks_per_node, world_size);
    e->ranks_per_node = (int)ranks_per_node;
    e->n_nodes = world_size / (int)ranks_per_node;
    if (!link) return OSDP_OK;
    const char *comma = strchr(link, ',');
    double bandwidth = 0, latency = 0;
    if (!comma || parse_bandwidth(link, (size_t)(comma - link), &bandwidth) != 0 || parse_latency(comma + 1, &latency) != 0)
        return osdp_error_set(OSDP_ERR_INPUT,
                              "--emulate-link '%s': expected BANDWIDTH,LATENCY such as 12.5G,5us (bytes per second > 0 "
                              "with an optional K, M, G or T suffix; seconds >= 0 with a unit s, ms, us or ns)", link);
    e->has_link = 1;
    e->alpha = latency;
    e->beta = 1.0 / bandwidth;
    return OSDP_OK;
}

const char *osdp_link_emulation_describe(const osdp_link_emulation *e, char *buf, size_t n)
{
    if (!e || e->ranks_per_node <= 0) snprintf(buf, n, "%s", "");
    else if (!e->has_link)
        snprintf(buf, n, "emulated: %d node%s x %d ranks, no link", e->n_nodes, e->n_nodes == 1 ? "" : "s",
                 e->ranks_per_node);
    else
        snprintf(buf, n, "emulated: %d node%s x %d ranks, link %.4g GB/s %.4g us", e->n_nodes, e->n_nodes == 1 ? "" : "s",
                 e->ranks_per_node, 1e-9 / e->beta, 1e6 * e->alpha);
    return buf;
}

double osdp_link_floor_seconds(const osdp_link_emulation *e, osdp_collective kind, int n, size_t bytes)
{
    const double S = (double)bytes, step = e->alpha + S / n * e->beta;
    switch (kind) {
    case OSDP_COLL_ALL_GATHER:
    case OSDP_COLL_REDUCE_SCATTER:
    case OSDP_COLL_TP_ALL_GATHER:
    case OSDP_COLL_NODE_ALL_GATHER:
    case OSDP_COLL_NODE_REDUCE_SCATTER:
    case OSDP_COLL_CROSS_REDUCE_SCATTER:
    case OSDP_COLL_CROSS_ALL_GATHER:
        return (n - 1) * step;
    case OSDP_COLL_ALL_REDUCE:
    case OSDP_COLL_TP_ALL_REDUCE:
        return 2.0 * (n - 1) * step;
    case OSDP_COLL_BROADCAST:
    case OSDP_COLL_P2P:
        return e->alpha + S * e->beta;
    case OSDP_COLL_N_TYPES:
        break;
    }
    return 0;
}

/* ---- a communicator's link ---- */

void osdp_comm_link_attach(osdp_comm *c, MPI_Comm group)
{
    c->link = NULL;
    const osdp_link_emulation *e = osdp_comm_emulation();
    if (!e || !e->has_link) return;
    MPI_Group mine, world;
    MPI_Comm_group(group, &mine);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int *ranks = malloc(sizeof *ranks * (size_t)c->size), *in_world = malloc(sizeof *in_world * (size_t)c->size);
    struct osdp_comm_link *link = calloc(1, sizeof *link);
    int spans = 0;
    if (ranks && in_world && link) {
        for (int i = 0; i < c->size; i++) ranks[i] = i;
        MPI_Group_translate_ranks(mine, c->size, ranks, world, in_world);
        for (int i = 0; i < c->size; i++) {
            in_world[i] /= e->ranks_per_node;   /* now the node */
            spans |= in_world[i] != in_world[0];
        }
    }
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
    free(ranks);
    if (spans) {   /* out of memory leaves the group without the floor: faster, never wrong in its numbers */
        link->node_of = in_world;
        c->link = link;
    } else {
        free(in_world);
        free(link);
    }
}

void osdp_comm_link_detach(osdp_comm *c)
{
    if (!c->link) return;
    int kept = 0;   /* its collectives never waited (an error path) leave the queue with it */
    for (int i = 0; i < g_n_unstarted; i++)
        if (g_unstarted[i].link != c->link) g_unstarted[kept++] = g_unstarted[i];
    g_n_unstarted = kept;
    free(c->link->node_of);
    free(c->link->pending);
    free(c->link);
    c->link = NULL;
}

static void sleep_until(double deadline)
{
    double left = deadline - osdp_now_seconds();
    while (left > 0) {
        struct timespec ts = {(time_t)left, (long)((left - floor(left)) * 1e9)};
        nanosleep(&ts, NULL);
        left = deadline - osdp_now_seconds();
    }
}

/* a floor of floor_s from `from`, once the link's previous transfer has ended: its deadline, now the link's */
static double queue_floor(double *busy_until, double from, double floor_s)
{
    *busy_until = (from > *busy_until ? from : *busy_until) + floor_s;
    return *busy_until;
}

static link_pending *pending_of(struct osdp_comm_link *link, void *request)
{
    for (int i = 0; i < link->n_pending; i++)
        if (link->pending[i].request == request) return &link->pending[i];
    return NULL;
}

/* The rank is inside a wait or a blocking collective: the collectives issued before, whose data (MPI without a
 * progress thread) has not moved while it computed, start their floors now, in the order they were issued,
 * each once the link is free */
static void start_unstarted(void)
{
    for (int i = 0; i < g_n_unstarted; i++) {
        link_pending *p = pending_of(g_unstarted[i].link, g_unstarted[i].request);
        if (p) p->deadline = queue_floor(&g_collectives_busy_until, osdp_now_seconds(), p->floor_s);
    }
    g_n_unstarted = 0;
}

void osdp_comm_link_inside_backend(const void *request)
{
    for (int i = 0; i < g_n_unstarted; i++)
        if (request && g_unstarted[i].request == request) return;   /* its own wait: osdp_comm_link_waited's */
    start_unstarted();
}

/* remembers a non-blocking call's floor until its wait; 0: no room (the caller waits it out now) */
static int remember(struct osdp_comm_link *link, link_pending entry)
{
    if (link->n_pending == link->cap_pending) {
        int cap = link->cap_pending ? 2 * link->cap_pending : 64;
        link_pending *grown = realloc(link->pending, sizeof *grown * (size_t)cap);
        if (!grown) return 0;
        link->pending = grown;
        link->cap_pending = cap;
    }
    if (isnan(entry.deadline)) {
        if (g_n_unstarted == g_cap_unstarted) {
            int cap = g_cap_unstarted ? 2 * g_cap_unstarted : 64;
            link_unstarted *grown = realloc(g_unstarted, sizeof *grown * (size_t)cap);
            if (!grown) return 0;
            g_unstarted = grown;
            g_cap_unstarted = cap;
        }
        g_unstarted[g_n_unstarted++] = (link_unstarted){link, entry.request};
    }
    link->pending[link->n_pending++] = entry;
    return 1;
}

void osdp_comm_link_issued(osdp_comm *c, osdp_collective kind, size_t bytes, int peer, double t0, osdp_request *req)
{
    struct osdp_comm_link *link = c->link;
    if (!link) return;
    if (peer >= 0 && link->node_of[peer] == link->node_of[c->rank]) return;   /* a message inside a node */
    /* the link carries one transfer at a time: this call's floor starts once the previous one's has ended,
     * the previous collective's on any communicator for a collective, the previous message's on this
     * communicator for a message (a pipeline communicator's messages all go one way, and the link carries
     * both ways at once).  A blocking call has
     * completed here, so every rank it waits for has entered it: on a network its transfer starts only
     * then (a rank that enters a collective early waits for the last, then for the link), so its floor
     * starts now, not at this rank's own entry (t0): else the rank that arrives first would spend its
     * floor waiting and leave as soon as the last rank enters.  A non-blocking call's floor starts at its
     * issue (t0) where the backend moves its data alone (NCCL, on the device), and at this rank's next wait
     * or blocking collective where it moves data only inside its calls (MPI): there a rank that computes
     * between a collective's issue and its wait has moved none of its data over the link.  Messages keep
     * t0 on either: the receiver's call moves them. */
    const int blocking = !req || !req->impl, collective = kind != OSDP_COLL_P2P;
    const double floor_s = osdp_link_floor_seconds(osdp_comm_emulation(), kind, c->size, bytes);
    const int at_wait = !blocking && collective && !c->ops->advances_alone;
    if (at_wait && remember(link, (link_pending){req->impl, NAN, floor_s})) return;
    /* a blocking call, or one to start at its wait that there was no room to remember: its floor now */
    const int now = blocking || at_wait;
    if (now && collective) start_unstarted();   /* the calls before it move first */
    const double deadline = queue_floor(collective ? &g_collectives_busy_until : &link->busy_until,
                                        now ? osdp_now_seconds() : t0, floor_s);
    if (now || !remember(link, (link_pending){req->impl, deadline, floor_s}))
        sleep_until(deadline);   /* no room to remember it: wait out its floor now (slower, never faster than the link) */
}

void osdp_comm_link_waited(osdp_comm *c, void *request)
{
    struct osdp_comm_link *link = c->link;
    if (!link) return;
    link_pending *p = pending_of(link, request);
    if (!p) return;
    if (isnan(p->deadline)) start_unstarted();   /* this one among them */
    const double deadline = p->deadline;
    *p = link->pending[--link->n_pending];
    sleep_until(deadline);
}
