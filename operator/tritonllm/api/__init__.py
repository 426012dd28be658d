"""The TritonLLMDeployment API: pydantic models (the CRD's single source), names and versions."""

from .deployment import (
    FieldError,
    InvalidDeployment,
    Metadata,
    TritonLLMDeployment,
    parse_deployment,
)
from .spec import TritonLLMDeploymentSpec
from .status import Condition, EngineStatus, TritonLLMDeploymentStatus

__all__ = [
    "Condition",
    "EngineStatus",
    "FieldError",
    "InvalidDeployment",
    "Metadata",
    "TritonLLMDeployment",
    "TritonLLMDeploymentSpec",
    "TritonLLMDeploymentStatus",
    "parse_deployment",
]
