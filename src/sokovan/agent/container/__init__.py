"""The container backend: each kernel is one OCI container run by an engine that speaks the Docker
Engine API (Docker, or Podman's compatible service), driven through aiodocker."""
