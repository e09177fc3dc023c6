"""Controllers: the API's entry points into the orchestrator's state (validate, write, hint)."""

from sokovan.manager.controller.deployment_controller import DeploymentController
from sokovan.manager.controller.errors import ControllerError
from sokovan.manager.controller.scheduling_controller import CreateOutcome, SchedulingController

__all__ = ["ControllerError", "CreateOutcome", "DeploymentController", "SchedulingController"]
