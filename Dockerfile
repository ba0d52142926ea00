# wattbit: the host agent (`wattbit agent`) and the site collector (`wattbit collector`).
# One image for both; docker-compose.yml picks the command. Pinned base image.
#
# The agent's default blockio backend (core) is a CO-RE BPF object compiled once, in the
# build stage below, with Debian's clang; at run time libbpf1 relocates it against the host
# kernel's BTF (/sys/kernel/btf/vmlinux, visible in a privileged container): no LLVM, no
# headers in the image. bcc stays as the fallback for kernels without BTF: it comes from Debian
# (python3-bpfcc, never PyPI's unrelated "bcc"), the virtualenv is made with
# --system-site-packages so it sees it, and it compiles at start against the *host's* kernel
# headers, which docker-compose mounts (/lib/modules, /usr/src).
FROM debian:12.8-slim AS bpf
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends clang libbpf-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY scripts/build-bpf.sh scripts/
# the whole tree: each program's sources and the headers it includes (blockio's stat_val.h,
# the tcp programs) without a list here to fall behind scripts/build-bpf.sh
COPY exporters exporters
RUN bash scripts/build-bpf.sh

FROM debian:12.8-slim

ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      python3 python3-venv python3-bpfcc libbpf1 ethtool iproute2 smartmontools ca-certificates \
      freeipmi-tools \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/wattbit
COPY pyproject.toml README.md ./
COPY collector ./collector
COPY exporters ./exporters
COPY --from=bpf /src/exporters/blockio/core/blockio.bpf.o ./exporters/blockio/core/
COPY --from=bpf /src/exporters/tcp/core/flowlabel.bpf.o /src/exporters/tcp/core/egresslabel.bpf.o \
     ./exporters/tcp/core/
RUN python3 -m venv --system-site-packages /opt/wattbit/.venv \
 && /opt/wattbit/.venv/bin/pip install --no-cache-dir ".[report]" \
 && mkdir -p /var/lib/wattbit /etc/wattbit

ENV PATH=/opt/wattbit/.venv/bin:$PATH PYTHONUNBUFFERED=1
# 9731: agent, 9732: collector
EXPOSE 9731 9732
ENTRYPOINT ["wattbit"]
CMD ["--help"]
