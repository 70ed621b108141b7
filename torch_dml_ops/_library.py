"""The one torch.library fragment that every op of the ``torch_dml_ops`` namespace is defined in."""
import torch

NAMESPACE = "torch_dml_ops"
# FRAGMENT: the namespace may be extended by more than one module (one per op).
lib = torch.library.Library(NAMESPACE, "FRAGMENT")
