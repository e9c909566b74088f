"""ONNX graphs as model sources, read without the ``onnx`` package.

``wire`` decodes protobuf fields, ``structure`` the graph, nodes and value infos,
``csa_node`` one CSA node's attributes and state edges, ``record_axes`` the record-axis
lint, ``graph`` puts them together into a ``ModelSpec``.
"""
