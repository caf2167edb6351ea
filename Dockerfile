# carve image: the `carve` CLI (kubelet plugin), the soft-slice limiter and the fake GPU libraries.
#   docker build -t carve:dev .
# Layout the Helm chart (helm/carve) relies on:
#   /usr/local/carve/lib/libcarve-limiter.so   copied to the host by the chart's init container
#   /usr/local/carve/bin/carve-cdi-hook        the CDI createContainer hook (native/hook, static), copied too
#   /usr/local/carve/bin/carve-ldconfig        the static ldconfig the hook runs in containers, copied too
#   /usr/local/carve/fakes/libnvidia-ml.so.1   used by `--gpus fake:...` (CARVE_FAKE_LIB_DIR points here)
#   /usr/local/carve/fakes/libcuda.so.1
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- native/: the limiter and the fakes. Only headers are needed from CUDA and NVML: cuda.h from the CUDA
# runtime wheel, nvml.h from nvidia-nvml-dev (native/Makefile finds it through the Python given to it).
FROM ${PYTHON_IMAGE} AS native
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev make \
 && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir nvidia-cuda-runtime==13.0.96 nvidia-nvml-dev==13.5.37
WORKDIR /src
COPY native/ native/
RUN CUDA_HOME="$(python -c 'import glob, nvidia; print(sorted(glob.glob(list(nvidia.__path__)[0] + "/cu*/include/cuda.h"))[-1].rsplit("/include/", 1)[0])')" \
 && make -C native PYTHON=python CUDA_HOME="$CUDA_HOME" check-headers \
      build/libcarve-limiter.so build/fakes/libnvidia-ml.so.1 build/fakes/libcuda.so.1 build/carve-cdi-hook \
      build/carve-ldconfig
# The hook runs this ldconfig chroot'ed in containers and refuses a dynamic one: Debian's is static-pie.
RUN ! readelf -lW /src/native/build/carve-ldconfig | grep -q INTERP

# --- carve and its dependencies as wheels (binary wheels exist for all of them on CPython 3.11).
FROM ${PYTHON_IMAGE} AS wheels
WORKDIR /src
COPY pyproject.toml README.md ./
COPY api/ api/
COPY driver/ driver/
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# --- runtime
FROM ${PYTHON_IMAGE}
RUN --mount=type=bind,from=wheels,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels carve
COPY --from=native /src/native/build/libcarve-limiter.so /usr/local/carve/lib/libcarve-limiter.so
COPY --from=native /src/native/build/carve-cdi-hook /src/native/build/carve-ldconfig /usr/local/carve/bin/
COPY --from=native /src/native/build/fakes/ /usr/local/carve/fakes/
ENV CARVE_FAKE_LIB_DIR=/usr/local/carve/fakes \
    PYTHONUNBUFFERED=1
ENTRYPOINT ["carve"]
CMD ["plugin"]
