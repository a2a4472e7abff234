"""The input stage: `input_fn` deferred and called per input mode, the readers that hand each replica its batch,
the tensor infeed, the input's position in checkpoints, and data errors read out of TensorFlow's.
"""
