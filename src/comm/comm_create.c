/* A communicator of the backend the buffers need (osdp/comm.h): the one
 * place that knows both backends, so that neither calls the other's
 * constructor. */
#include "config.h"
#include "osdp/comm.h"
#include "osdp/cuda_plugin.h"

osdp_status osdp_comm_create(osdp_comm *c, const void *mpi_comm, int nccl, int local_device)
{
#ifdef OSDP_HAVE_CUDA
    const osdp_cuda_plugin *cuda = nccl ? osdp_cuda_plugin_load() : NULL;
    if (cuda) return cuda->comm_create_nccl(c, mpi_comm, local_device);
    if (nccl) return osdp_error_set(OSDP_ERR_INPUT, "NCCL communicators: %s", osdp_cuda_plugin_error());
#else
    (void)local_device;
    if (nccl) return osdp_error_set(OSDP_ERR_INPUT, "NCCL communicators need a build with CUDA");
#endif
    return osdp_comm_create_mpi(c, mpi_comm);
}
