"""Pulumi ComponentResources, one concern each: DdpTrainingWorld, the one a program adds (type
`ddp-infra:index:DdpTrainingWorld`), and its parts (types under `ddp-infra:training:`)."""

from .guardrails import Guardrails, GuardrailsArgs
from .hf_token import HfTokenSecret, HfTokenSecretArgs
from .namespace import TrainingNamespace, TrainingNamespaceArgs
from .rendezvous import Rendezvous, RendezvousArgs
from .secret_env import SecretEnv, SecretEnvArgs
from .storage import TrainingStorage, TrainingStorageArgs
from .trainer import Trainer, TrainerArgs
from .training_world import DdpTrainingWorld, DdpTrainingWorldArgs

__all__ = [
    "DdpTrainingWorld", "DdpTrainingWorldArgs", "Guardrails", "GuardrailsArgs", "HfTokenSecret",
    "HfTokenSecretArgs", "Rendezvous", "RendezvousArgs", "SecretEnv", "SecretEnvArgs", "Trainer", "TrainerArgs",
    "TrainingNamespace", "TrainingNamespaceArgs", "TrainingStorage", "TrainingStorageArgs",
]
