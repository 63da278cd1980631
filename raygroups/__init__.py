"""raygroups: group communication and cluster membership for Python, running on Ray.

- ``raygroups.stack``: the protocol stack (``Channel``, ``StackConfig``, the simulator); needs
  only msgpack, tenacity and cryptography.
- ``raygroups.actors``: member actors, the ``Group`` handle, the HTTP API and the CLI; needs
  Ray (the core install).
- ``raygroups.integration``: Spark pipelines on RayDP; needs ``pip install 'raygroups[spark]'``.

See docs/architecture.md in the source repository for the design.
"""
__version__ = "0.2.0"
