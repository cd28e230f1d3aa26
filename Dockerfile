# One image for every stormlab service: the metadata service, the racks, loadgen, the cascade's
# services and chaos.
# BASE_IMAGE defaults to the official slim Python image; CI builds it from Debian packages
# (docker/local-images.sh) because it reaches no registry.
ARG BASE_IMAGE=python:3.11-slim-bookworm

# Python packages in a stage of their own: the wheelhouse and pip's leftovers stay there, the
# final image takes the virtualenv alone. From docker/wheelhouse when it holds wheels (no
# network), else from PyPI; the list is pyproject's dependencies and its docker extra. Before
# the code: a code change does not reinstall them.
FROM ${BASE_IMAGE} AS deps
COPY docker/wheelhouse /wheelhouse
COPY pyproject.toml constraints.txt /opt/stormlab/src/
RUN python3 -c "import tomllib; p = tomllib.load(open('/opt/stormlab/src/pyproject.toml', 'rb'))['project']; \
      print('\n'.join(p['dependencies'] + p['optional-dependencies']['docker']))" > /opt/stormlab/requirements.txt \
    && python3 -m venv /opt/stormlab/venv \
    && if ls /wheelhouse/*.whl >/dev/null 2>&1; then \
         /opt/stormlab/venv/bin/pip install --quiet --no-index --find-links /wheelhouse setuptools wheel -r /opt/stormlab/requirements.txt; \
       else \
         /opt/stormlab/venv/bin/pip install --quiet --no-cache-dir -c /opt/stormlab/src/constraints.txt setuptools wheel -r /opt/stormlab/requirements.txt; \
       fi

FROM ${BASE_IMAGE}

# iptables: the docker chaos backend cuts a rack off from inside its own network namespace.
# procps: pgrep, to find the service process for the pause and kill faults.
# iproute2: tc, for the latency and loss faults (netem, where the host's kernel has it).
RUN if ! command -v iptables >/dev/null || ! command -v pgrep >/dev/null || ! command -v tc >/dev/null; then \
      apt-get update && apt-get install -y --no-install-recommends iptables procps iproute2 \
      && rm -rf /var/lib/apt/lists/*; \
    fi

COPY --from=deps /opt/stormlab/venv /opt/stormlab/venv

# The code: installed without its dependencies (they are above) and without the network.
COPY docker/healthz /usr/local/bin/healthz
COPY pyproject.toml README.md LICENSE /opt/stormlab/src/
COPY stormcore /opt/stormlab/src/stormcore
COPY metadata_service /opt/stormlab/src/metadata_service
COPY storage_node /opt/stormlab/src/storage_node
COPY chaos /opt/stormlab/src/chaos
COPY services /opt/stormlab/src/services
COPY stormlab /opt/stormlab/src/stormlab
RUN /opt/stormlab/venv/bin/pip install --quiet --no-deps --no-index --no-build-isolation /opt/stormlab/src \
    && rm -rf /root/.cache /opt/stormlab/src/build

# The services run unprivileged; chaos execs its iptables commands as root in the container.
# Its data directory exists in the image, owned by it, so a volume mounted there is writable.
# A fixed numeric uid: Kubernetes' runAsNonRoot can check a number, not a name.
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/stormlab --create-home stormlab \
    && install -d -o stormlab -g stormlab /var/lib/stormlab/data
ENV PATH=/opt/stormlab/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    STORMLAB_HOST=0.0.0.0 \
    STORMLAB_STATE_DIR=/var/lib/stormlab \
    STORMLAB_DATA_DIR=/var/lib/stormlab/data
USER 10001:10001
WORKDIR /var/lib/stormlab
CMD ["stormlab", "--help"]
