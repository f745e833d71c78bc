"""What every inference-engine integration shares: a model kept joined to a group of trainer
ranks, versions received and verified in the background, applied atomically at the engine's
update call (receiver), which parameters hold the checkpoint's bytes (holds), how an engine's
tensor-parallel layout maps onto the checkpoint's tensors (layout), and the rollback of a failed
update (rollback). The engine-specific parts live with each integration."""
from .receiver import ModelReceiver, receiver_for

__all__ = ["ModelReceiver", "receiver_for"]
