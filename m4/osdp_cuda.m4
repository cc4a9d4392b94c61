# OSDP_CHECK_CUDA: --with-cuda[=DIR] (default: use CUDA when nvcc is found),
# --without-cuda turns it off.  Sets NVCC, CUDA_CFLAGS, CUDA_LIBS, NVCCFLAGS,
# the automake conditional HAVE_CUDA and the C macro OSDP_HAVE_CUDA.
# Building needs no GPU: only the toolkit, cuBLAS and NCCL headers/libraries.
AC_DEFUN([OSDP_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [build the CUDA/NCCL backend (default: when nvcc is found)])],
    [], [with_cuda=check])
  AC_ARG_VAR([NVCCFLAGS], [flags for nvcc (default: -O3 -arch=sm_80 plus sm_90 code)])
  osdp_have_cuda=no
  osdp_have_cublas=no
  osdp_have_nccl=no
  osdp_cuda_dir=
  AS_IF([test "x$with_cuda" != xno], [
    AS_CASE([$with_cuda], [yes|check], [osdp_cuda_path="$PATH:/usr/local/cuda/bin"],
                          [osdp_cuda_path="$with_cuda/bin"])
    AC_PATH_PROG([NVCC], [nvcc], [], [$osdp_cuda_path])
    AS_IF([test -n "$NVCC"], [
      osdp_cuda_dir=`AS_DIRNAME(["$NVCC"])`
      osdp_cuda_dir=`cd "$osdp_cuda_dir/.." && pwd`
      CUDA_CFLAGS="-I$osdp_cuda_dir/include"
      osdp_cuda_libdir="$osdp_cuda_dir/lib64"
      test -d "$osdp_cuda_libdir" || osdp_cuda_libdir="$osdp_cuda_dir/lib"
      osdp_save_LIBS=$LIBS
      osdp_save_CPPFLAGS=$CPPFLAGS
      osdp_save_LDFLAGS=$LDFLAGS
      CPPFLAGS="$CPPFLAGS $CUDA_CFLAGS"
      LDFLAGS="$LDFLAGS -L$osdp_cuda_libdir"
      AC_CHECK_HEADER([cublas_v2.h], [AC_CHECK_LIB([cublas], [cublasCreate_v2], [osdp_have_cublas=yes])])
      AC_CHECK_HEADER([nccl.h], [AC_CHECK_LIB([nccl], [ncclCommInitRank], [osdp_have_nccl=yes])])
      AC_CHECK_LIB([cudart], [cudaMalloc], [osdp_have_cudart=yes], [osdp_have_cudart=no])
      LIBS=$osdp_save_LIBS
      CPPFLAGS=$osdp_save_CPPFLAGS
      LDFLAGS=$osdp_save_LDFLAGS
      AS_IF([test "x$osdp_have_cublas$osdp_have_nccl$osdp_have_cudart" = xyesyesyes], [
        osdp_have_cuda=yes
        CUDA_LIBS="-L$osdp_cuda_libdir -Wl,-rpath,$osdp_cuda_libdir -lnccl -lcublasLt -lcublas -lcudart -lstdc++"
        AS_IF([test -z "$NVCCFLAGS"], [NVCCFLAGS="-O3 -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90"])
        AC_DEFINE([OSDP_HAVE_CUDA], [1], [the CUDA/NCCL backend is built])
      ], [AS_IF([test "x$with_cuda" != xcheck],
            [AC_MSG_ERROR([--with-cuda: nvcc found but cuBLAS, NCCL or cudart is missing under $osdp_cuda_dir])])])
    ], [AS_IF([test "x$with_cuda" != xcheck], [AC_MSG_ERROR([--with-cuda given but nvcc not found in $osdp_cuda_path])])])
  ])
  AC_SUBST([CUDA_CFLAGS])
  AC_SUBST([CUDA_LIBS])
  AC_SUBST([NVCCFLAGS])
  AM_CONDITIONAL([HAVE_CUDA], [test "x$osdp_have_cuda" = xyes])
])
