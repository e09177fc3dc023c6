"""The agent daemon and its process backend: kernels as OS processes, driven over signed RPC."""

from sokovan.agent.daemon import AgentConfig, AgentDaemon
from sokovan.agent.images import ImageCatalog, ImageCatalogError
from sokovan.agent.runtime import AgentStartError

__all__ = ["AgentConfig", "AgentDaemon", "AgentStartError", "ImageCatalog", "ImageCatalogError"]
