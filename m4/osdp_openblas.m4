# OSDP_CHECK_OPENBLAS: finds OpenBLAS through pkg-config and sets OPENBLAS_CFLAGS,
# OPENBLAS_LIBS and osdp_blas_threading.
#
# The OpenMP build of OpenBLAS is preferred (--with-openblas-threading=openmp,
# the default when installed).  With the pthread build, OpenBLAS keeps its own
# worker pool that spins in sched_yield between calls; on a node where every
# core already runs one of our OpenMP threads (or one MPI rank) those spinning
# workers steal the cores our kernels need.  Measured on 2 cores: 43% -> 60% of
# sgemm's rate for the L6/d256 benchmark (scripts/bench_cpu).  The OpenMP build
# shares our OpenMP runtime and its passive wait policy instead.
#
# Debian/Ubuntu install the OpenMP build (libopenblas-openmp-dev) beside the
# default one under <libdir>/openblas-openmp; the link gets an rpath to it so
# that the loader does not pick the system-wide alternative (often pthread).
AC_DEFUN([OSDP_CHECK_OPENBLAS], [
  AC_ARG_WITH([openblas-threading],
    [AS_HELP_STRING([--with-openblas-threading=openmp|any],
      [which OpenBLAS build to link (default: openmp when libopenblas-openmp-dev is installed, else the one pkg-config finds)])],
    [], [with_openblas_threading=auto])
  osdp_blas_threading=unknown
  osdp_openblas_omp_pc=
  AS_IF([test "x$with_openblas_threading" != xany], [
    for osdp_dir in /usr/lib/*/openblas-openmp/pkgconfig /usr/lib64/openblas-openmp/pkgconfig; do
      AS_IF([test -f "$osdp_dir/openblas.pc"], [osdp_openblas_omp_pc=$osdp_dir; break])
    done])
  AS_IF([test -n "$osdp_openblas_omp_pc"], [
    osdp_save_PKG_CONFIG_PATH=$PKG_CONFIG_PATH
    PKG_CONFIG_PATH="$osdp_openblas_omp_pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    export PKG_CONFIG_PATH
    PKG_CHECK_MODULES([OPENBLAS], [openblas], [
      osdp_blas_threading=openmp
      osdp_openblas_libdir=`$PKG_CONFIG --variable=libdir openblas`
      OPENBLAS_LIBS="-Wl,-rpath,$osdp_openblas_libdir $OPENBLAS_LIBS"
      osdp_blas_version=`$PKG_CONFIG --modversion openblas`])
    PKG_CONFIG_PATH=$osdp_save_PKG_CONFIG_PATH
    export PKG_CONFIG_PATH
  ], [
    AS_IF([test "x$with_openblas_threading" = xopenmp],
      [AC_MSG_ERROR([the OpenMP build of OpenBLAS was asked for but not found: apt-get install libopenblas-openmp-dev])])
    PKG_CHECK_MODULES([OPENBLAS], [openblas], [],
      [AC_MSG_ERROR([OpenBLAS not found: apt-get install libopenblas-openmp-dev (or load an OpenBLAS module and set PKG_CONFIG_PATH)])])
    osdp_blas_version=`$PKG_CONFIG --modversion openblas`
    osdp_blas_config=`$PKG_CONFIG --variable=openblas_config openblas 2>/dev/null`
    AS_CASE([$osdp_blas_config], [*USE_OPENMP=1*], [osdp_blas_threading=openmp],
                                 [*USE_OPENMP=0*], [osdp_blas_threading=pthread])
    AS_IF([test "x$osdp_blas_threading" = xpthread],
      [AC_MSG_WARN([linking the pthread build of OpenBLAS: its spinning workers compete with OpenMP threads; libopenblas-openmp-dev is faster])])
  ])
])
