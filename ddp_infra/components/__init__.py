"""Pulumi ComponentResources, one concern each; all type tokens live under `ddp-infra:training:`."""

from .guardrails import Guardrails, GuardrailsArgs
from .hf_token import HfTokenSecret, HfTokenSecretArgs
from .namespace import TrainingNamespace, TrainingNamespaceArgs
from .rendezvous import Rendezvous, RendezvousArgs
from .secret_env import SecretEnv, SecretEnvArgs
from .stack import DdpTrainingStack, DdpTrainingStackArgs
from .storage import TrainingStorage, TrainingStorageArgs
from .trainer import Trainer, TrainerArgs

__all__ = [
    "DdpTrainingStack", "DdpTrainingStackArgs", "Guardrails", "GuardrailsArgs", "HfTokenSecret",
    "HfTokenSecretArgs", "Rendezvous", "RendezvousArgs", "SecretEnv", "SecretEnvArgs", "Trainer", "TrainerArgs",
    "TrainingNamespace", "TrainingNamespaceArgs", "TrainingStorage", "TrainingStorageArgs",
]
