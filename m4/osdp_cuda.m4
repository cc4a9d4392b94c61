# OSDP_CHECK_CUDA: --with-cuda[=DIR] (default: use CUDA when nvcc is found),
# --without-cuda turns it off; --with-nccl=DIR for an NCCL outside the CUDA
# tree (DIR/include/nccl.h, DIR/lib or DIR/lib64).  Sets NVCC, CUDA_CFLAGS,
# CUDA_LIBS, NVCCFLAGS, NVCC_HOST_FLAGS (the host compiler and the MPI
# include flags for .cu files), the automake conditional HAVE_CUDA, the C
# macro OSDP_HAVE_CUDA, and osdp_cuda_summary for configure's closing table.
# Building needs no GPU: only the toolkit, cuBLAS and NCCL headers/libraries.
#
# Missing pieces: with --with-cuda (yes or DIR) configure stops and says what
# is missing; with the default (check) it builds the CPU-only binary and the
# summary says why, so that a CPU-only binary is never a surprise.
AC_DEFUN([OSDP_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [build the CUDA/NCCL backend (default: when nvcc is found)])],
    [], [with_cuda=check])
  AC_ARG_WITH([nccl],
    [AS_HELP_STRING([--with-nccl=DIR], [NCCL installed under DIR (default: the CUDA tree, then the system paths)])],
    [], [with_nccl=])
  AC_ARG_VAR([NVCCFLAGS], [flags for nvcc (default: -O3, sm_80 and sm_90 code, and compute_90 PTX for newer GPUs)])
  AC_ARG_VAR([NVCC_CCBIN], [host C++ compiler for nvcc (default: nvcc's own choice; not the MPI wrapper)])
  osdp_have_cuda=no
  osdp_have_cublas=no
  osdp_have_nccl=no
  osdp_cuda_dir=
  osdp_cuda_summary="no (--without-cuda)"
  AS_IF([test "x$with_cuda" != xno], [
    osdp_cuda_summary="no (nvcc not found: --with-cuda=DIR, or load the CUDA module)"
    AS_CASE([$with_cuda], [yes|check], [osdp_cuda_path="$PATH:/usr/local/cuda/bin"],
                          [osdp_cuda_path="$with_cuda/bin"])
    AC_PATH_PROG([NVCC], [nvcc], [], [$osdp_cuda_path])
    AS_IF([test -n "$NVCC"], [
      osdp_cuda_dir=`AS_DIRNAME(["$NVCC"])`
      osdp_cuda_dir=`cd "$osdp_cuda_dir/.." && pwd`
      CUDA_CFLAGS="-I$osdp_cuda_dir/include"
      osdp_cuda_libdir="$osdp_cuda_dir/lib64"
      test -d "$osdp_cuda_libdir" || osdp_cuda_libdir="$osdp_cuda_dir/lib"
      osdp_cuda_ldflags="-L$osdp_cuda_libdir -Wl,-rpath,$osdp_cuda_libdir"
      # NCCL: --with-nccl=DIR, else wherever the CUDA tree and the default paths have it
      osdp_nccl_cflags=
      osdp_nccl_ldflags=
      AS_IF([test -n "$with_nccl" && test "x$with_nccl" != xyes], [
        osdp_nccl_libdir="$with_nccl/lib64"
        test -d "$osdp_nccl_libdir" || osdp_nccl_libdir="$with_nccl/lib"
        osdp_nccl_cflags="-I$with_nccl/include"
        osdp_nccl_ldflags="-L$osdp_nccl_libdir -Wl,-rpath,$osdp_nccl_libdir"
      ])
      osdp_save_LIBS=$LIBS
      osdp_save_CPPFLAGS=$CPPFLAGS
      osdp_save_LDFLAGS=$LDFLAGS
      CPPFLAGS="$CPPFLAGS $osdp_nccl_cflags $CUDA_CFLAGS"
      LDFLAGS="$LDFLAGS $osdp_nccl_ldflags -L$osdp_cuda_libdir"
      AC_CHECK_HEADER([cublas_v2.h], [AC_CHECK_LIB([cublas], [cublasCreate_v2], [osdp_have_cublas=yes])])
      # an explicit --with-nccl=DIR is the only place looked at
      AS_IF([test -z "$osdp_nccl_cflags" || test -f "$with_nccl/include/nccl.h"],
            [AC_CHECK_HEADER([nccl.h], [AC_CHECK_LIB([nccl], [ncclCommSplit], [osdp_have_nccl=yes])])])
      AC_CHECK_LIB([cudart], [cudaMalloc], [osdp_have_cudart=yes], [osdp_have_cudart=no])
      LIBS=$osdp_save_LIBS
      CPPFLAGS=$osdp_save_CPPFLAGS
      LDFLAGS=$osdp_save_LDFLAGS
      osdp_missing=
      test "x$osdp_have_cudart" = xyes || osdp_missing="$osdp_missing cudart"
      test "x$osdp_have_cublas" = xyes || osdp_missing="$osdp_missing cuBLAS"
      test "x$osdp_have_nccl" = xyes || osdp_missing="$osdp_missing NCCL>=2.18 (${with_nccl:-in the CUDA tree or the system paths; --with-nccl=DIR})"
      AS_IF([test -z "$osdp_missing"], [
        osdp_have_cuda=yes
        CUDA_CFLAGS="$osdp_nccl_cflags $CUDA_CFLAGS"
        # The rpath pins this machine's CUDA libraries: build on the cluster
        # with its CUDA module, whose driver runs them (CUDA 13 needs a 580+ driver).
        CUDA_LIBS="$osdp_nccl_ldflags $osdp_cuda_ldflags -lnccl -lcublasLt -lcublas -lcudart -lstdc++"
        # SASS for A100 (sm_80) and H100 (sm_90), and the compute_90 PTX that
        # the driver compiles for newer GPUs (Blackwell, ...) at first launch
        AS_IF([test -z "$NVCCFLAGS"],
              [NVCCFLAGS="-O3 -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"])
        # .cu files include mpi.h: nvcc compiles them with a C++ compiler it
        # accepts (not the MPI wrapper, which may wrap one it refuses) and the
        # wrapper's include flags (MPICH: -show; Open MPI: --showme:compile)
        osdp_mpi_show=`$CC -show 2>/dev/null || $CC --showme:compile 2>/dev/null`
        osdp_mpi_includes=
        for osdp_flag in $osdp_mpi_show; do
          AS_CASE([$osdp_flag], [-I*|-D*], [osdp_mpi_includes="$osdp_mpi_includes $osdp_flag"])
        done
        NVCC_HOST_FLAGS="$osdp_mpi_includes"
        AS_IF([test -n "$NVCC_CCBIN"], [NVCC_HOST_FLAGS="-ccbin $NVCC_CCBIN$NVCC_HOST_FLAGS"])
        osdp_nccl_version=`printf '#include <nccl.h>\nNCCL_MAJOR.NCCL_MINOR.NCCL_PATCH\n' | $CC -E $osdp_nccl_cflags $CUDA_CFLAGS - 2>/dev/null | tail -1 | tr -d ' '`
        osdp_cuda_summary="yes ($osdp_cuda_dir; NCCL $osdp_nccl_version)"
        AC_DEFINE([OSDP_HAVE_CUDA], [1], [the CUDA/NCCL backend is built])
      ], [
        AS_IF([test "x$with_cuda" != xcheck],
              [AC_MSG_ERROR([--with-cuda: nvcc found in $osdp_cuda_dir but missing:$osdp_missing])])
        osdp_cuda_summary="NO, CPU-only binary: nvcc found in $osdp_cuda_dir but missing:$osdp_missing"
        AC_MSG_WARN([building a CPU-only osdp_gpt: nvcc found but missing:$osdp_missing])
      ])
    ], [AS_IF([test "x$with_cuda" != xcheck], [AC_MSG_ERROR([--with-cuda given but nvcc not found in $osdp_cuda_path])])])
  ])
  AC_SUBST([CUDA_CFLAGS])
  AC_SUBST([CUDA_LIBS])
  AC_SUBST([NVCCFLAGS])
  AC_SUBST([NVCC_HOST_FLAGS])
  AM_CONDITIONAL([HAVE_CUDA], [test "x$osdp_have_cuda" = xyes])
])
