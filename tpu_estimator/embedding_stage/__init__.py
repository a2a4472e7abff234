"""The embedding stage of a step on shards: ids preprocessed and looked up in the `embedding` engine, the
gradient tap and the engine's update, the host infeed thread, the exchange between hosts, and lookups off the
shards (serving).
"""
