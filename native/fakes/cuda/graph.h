/*
 * graph.h (fake libcuda): the graph, node and executable-graph objects shared by graph.c (building and
 * inspecting graphs), capture.c (stream capture) and graph_exec.c (instantiation, replay, update).
 */
#ifndef CARVE_FAKE_CUDA_GRAPH_H
#define CARVE_FAKE_CUDA_GRAPH_H

#include "fakecuda.h"

#define FC_GRAPH_MAGIC 0x48505247u
#define FC_EXEC_MAGIC 0x43455847u
#define FC_NODE_MAGIC 0x45444f4eu

enum { N_KERNEL, N_MEMSET, N_COPY, N_COPY3D, N_EMPTY, N_HOST, N_CHILD };

typedef struct fc_gnode {
    uint32_t magic;
    int type;
    fc_graph_t *graph;
    CUDA_KERNEL_NODE_PARAMS k;
    struct {
        uint64_t dst;
        size_t pitch;
        uint32_t value;
        unsigned elem;
        size_t width, height;
    } ms;
    struct {
        void *dst;
        const void *src;
        size_t n;
    } cp;
    CUDA_MEMCPY3D c3;
    CUDA_HOST_NODE_PARAMS host;
    fc_graph_t *child;
    const struct fc_gnode *orig; /* in an executable graph: the node it was instantiated from */
} fc_gnode_t;

struct fc_graph {
    uint32_t magic;
    size_t n, cap;
    fc_gnode_t **nodes;
};

typedef struct fc_exec {
    uint32_t magic;
    size_t n;
    fc_gnode_t *nodes;
} fc_exec_t;

/* Handle checks: the object behind a handle, or NULL when it is not a live object of that kind. */
fc_graph_t *fc_graph_get(CUgraph g);
fc_gnode_t *fc_node_get(CUgraphNode n);
fc_exec_t *fc_exec_get(CUgraphExec e);

fc_graph_t *fc_graph_new(void);
void fc_graph_free(fc_graph_t *g);
/* Appends a node of that type (serialised: streams of one capture may run on several threads). */
fc_gnode_t *fc_node_add(fc_graph_t *g, int type);
fc_graph_t *fc_graph_clone(const fc_graph_t *src);
/* Node parameters from a caller's struct: kernel params v1 or v2 layout, memset params. */
void fc_kernel_params_in(CUDA_KERNEL_NODE_PARAMS *dst, const void *src, int v2);
void fc_memset_in(fc_gnode_t *n, const CUDA_MEMSET_NODE_PARAMS *p);

#endif
