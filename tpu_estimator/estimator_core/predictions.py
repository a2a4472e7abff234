"""Selecting and splitting the predictions `Estimator.predict` yields."""


def extract_keys(predictions, predict_keys):
    """The predictions whose keys are in `predict_keys` (all of them without `predict_keys`).

    Raises:
      ValueError: `predict_keys` with non-dict predictions, or none of the keys present.
    """
    if not predict_keys:
        return predictions
    if not isinstance(predictions, dict):
        raise ValueError("predict_keys argument is not valid in case of non-dict predictions.")
    existing_keys = predictions.keys()
    predictions = {key: value for key, value in predictions.items() if key in predict_keys}
    if not predictions:
        raise ValueError("Expected to run at least one output from %s, provided %s." % (existing_keys, predict_keys))
    return predictions


def batch_length(preds_evaluated) -> int:
    """The common first dimension of evaluated dict predictions.

    Raises:
      ValueError: predictions of different batch lengths.
    """
    length = None
    for key, value in preds_evaluated.items():
        length = length or value.shape[0]
        if value.shape[0] != length:
            raise ValueError(
                "Batch length of predictions should be same. %s has different batch length than others." % key
            )
    return length
