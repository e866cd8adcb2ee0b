# syntax=docker/dockerfile:1
# A dev layer for the real-node tests, never a product image: the Ray head's and workers' image there. It is the
# operator image's Ray (ray[default], pinned by constraints.txt) with what a trainer image gives KubeRay and the
# Ray job: wget (KubeRay's default probes call it), the trainer launcher, and the miles double at miles's own path,
# so the argv the operator renders runs unchanged; and the trainer image's stacks hook (the .pth of
# grpo_launcher.stackdump in the venv), asserted as the trainer image asserts it. No GPU and no miles: the
# preflight's GPU checks fail here.
# Built by devtools/grpo_dev/images (DEV_IMAGES) on top of the operator image it has just built.
ARG OPERATOR_IMAGE=localhost/grpo-operator:dev
FROM ${OPERATOR_IMAGE}
USER root
RUN apt-get update \
    && apt-get install -y --no-install-recommends wget \
    && rm -rf /var/lib/apt/lists/*
COPY trainer_image/pyproject.toml /src/launcher/pyproject.toml
COPY trainer_image/src /src/launcher/src
RUN --mount=type=secret,id=pipconf --mount=type=secret,id=pipca \
    PIP_CONFIG_FILE=/run/secrets/pipconf /opt/venv/bin/pip install --no-cache-dir --no-deps /src/launcher \
    && rm -rf /src/launcher \
    && /opt/venv/bin/python -c "import grpo_launcher.cli, ray" \
    && /opt/venv/bin/python -m grpo_launcher.stackdump --install-pth \
    && GRPO_STACKS_DIR=/tmp/grpo-stacks-check /opt/venv/bin/python -m grpo_launcher.stackdump --check \
    && rm -rf /tmp/grpo-stacks-check
# KubeRay starts Ray through `bash -lc`, whose /etc/profile resets PATH: the venv's ray and python3 go first again.
RUN echo 'export PATH=/opt/venv/bin:$PATH' > /etc/profile.d/venv.sh
# miles's entry point is the double; /root traversable as in the trainer image, whose user is not root either.
COPY devtools/grpo_dev/fake_miles.py /root/miles/train.py
RUN chmod 0755 /root /root/miles && chmod 0644 /root/miles/train.py
USER 10001:10001
