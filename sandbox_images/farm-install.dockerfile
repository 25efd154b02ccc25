# farm and its dependencies in the venv /opt/farm, from the build context's wheels
# (deps/: farm's dependencies with the kind's extra; farm/: farm's own wheel), the
# dependencies in a layer of their own so that a change to farm redoes only the last.
# Each kind's Dockerfile has it at its line `INCLUDE farm-install.dockerfile`, which
# `farm images build` replaces with this file (docker has no include).
COPY deps/ /opt/farm-wheels/
RUN python3 -m venv /opt/farm \
 && /opt/farm/bin/pip install --no-cache-dir --no-index --disable-pip-version-check \
      /opt/farm-wheels/*.whl
COPY farm/ /opt/farm-wheels/
RUN /opt/farm/bin/pip install --no-cache-dir --no-index --no-deps --disable-pip-version-check \
      /opt/farm-wheels/farm-*.whl \
 && rm -rf /opt/farm-wheels
