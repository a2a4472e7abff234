"""How many steps the embedding infeed thread prepares per `Session.run`: enough that the run's fixed cost is
amortised over about 65,536 ids, between 8 and 64 steps."""

import pytest

from tpu_estimator.embedding_stage import embedding_infeed


@pytest.mark.parametrize(
    "batch, features, steps",
    [
        (32, 2, 64),  # workload D: 64 ids per step, bound by the run's fixed cost -> the most steps
        (1024, 26, 8),  # workload A: 26,624 ids per step -> the fewest
        (512, 4, 32),  # 2,048 ids per step -> 65,536 / 2,048
        (1000, 3, 22),  # rounded up: ceil(65,536 / 3,000)
        (None, 5, 64),  # unknown batch size: counted as 1 row
    ],
)
def test_steps_per_run_amortises_the_run_over_the_ids_of_its_steps(batch, features, steps):
    assert embedding_infeed.steps_per_run(batch, features) == steps


def test_each_mode_has_its_host_stage_type():
    stages = embedding_infeed.HostStage
    assert type(stages.for_training(None, None)) is embedding_infeed.PreprocessIds
    assert type(stages.for_evaluation(None, None)) is embedding_infeed.LookUp
    assert type(stages.for_prediction(None, None)) is embedding_infeed.LookUpPadded
    with pytest.raises(TypeError):
        stages(None, None)  # abstract: a stage is one of the modes'
