"""The network benchmark: brokers as processes, plain alongside, the paper's figure beside ours."""

__all__: list[str] = []
