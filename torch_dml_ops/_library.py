"""The one torch.library fragment that every op of the ``torch_dml_ops`` namespace is defined in."""
import torch

NAMESPACE = "torch_dml_ops"
# FRAGMENT: the namespace may be extended by more than one module (one per op).
lib = torch.library.Library(NAMESPACE, "FRAGMENT")


def document(opname: str, doc: str) -> None:
    """Give ``torch.ops.torch_dml_ops.<opname>`` and its overloads a docstring (the dispatcher's
    objects have none): ``doc``, then the schema of each overload."""
    packet = getattr(getattr(torch.ops, NAMESPACE), opname)
    schemas = []
    for name in packet.overloads():
        overload = getattr(packet, name)
        schema = str(overload._schema)
        overload.__doc__ = f"{doc}\n\nSchema:\n    {schema}\n"
        schemas.append(schema)
    packet.__doc__ = doc + "\n\nSchemas:\n" + "".join(f"    {s}\n" for s in schemas)
