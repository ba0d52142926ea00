# wattbit: the host agent (`wattbit agent`) and the site collector (`wattbit collector`).
# One image for both; docker-compose.yml picks the command. Pinned base image.
#
# bcc comes from Debian (python3-bpfcc, never PyPI's unrelated "bcc"): the virtualenv is made
# with --system-site-packages so it sees it, as scripts/bootstrap.sh does on a host. bcc
# compiles the agent's BPF program at start against the *host's* kernel headers, which
# docker-compose mounts (/lib/modules, /usr/src), so no headers are baked in here.
FROM debian:12.8-slim

ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      python3 python3-venv python3-bpfcc ethtool iproute2 smartmontools ca-certificates \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/wattbit
COPY pyproject.toml README.md ./
COPY collector ./collector
COPY exporters ./exporters
RUN python3 -m venv --system-site-packages /opt/wattbit/.venv \
 && /opt/wattbit/.venv/bin/pip install --no-cache-dir . \
 && mkdir -p /var/lib/wattbit /etc/wattbit

ENV PATH=/opt/wattbit/.venv/bin:$PATH PYTHONUNBUFFERED=1
# 9731: agent, 9732: collector
EXPOSE 9731 9732
ENTRYPOINT ["wattbit"]
CMD ["--help"]
