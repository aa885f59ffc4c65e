"""Every metric on hand-computed cases (the numbers in the comments are worked out by hand)."""

import pytest

from agentcir.framework.errors import InputError
from agentcir.framework.eval.metrics import (
    average_precision_at_k,
    best_at_k,
    check_no_duplicates,
    circo_metrics,
    cirr_metrics,
    covr_metrics,
    disbench_metrics,
    fashioniq_average,
    map_at_k,
    ranked_set_recall,
    recall_at_k,
    remove_ids,
    set_scores,
    subset_ranking,
)


def test_recall_at_k_hand_case():
    rankings = [["a", "t1", "b"], ["t2", "x"], ["x", "y", "z"]]
    # query 1 hits at rank 2, query 2 at rank 1, query 3 never
    assert recall_at_k(rankings, ["t1", "t2", "t3"], [1, 2, 3]) == {"R@1": 100 / 3, "R@2": 200 / 3, "R@3": 200 / 3}
    # several targets: any of them counts
    assert recall_at_k([["a", "b"]], [["z", "b"]], [1, 2]) == {"R@1": 0.0, "R@2": 100.0}


def test_recall_needs_rankings_and_matching_lengths():
    with pytest.raises(InputError, match="recall_at_k: no rankings"):
        recall_at_k([], [], [1])
    with pytest.raises(InputError, match="2 rankings but 1 ground-truth entries"):
        recall_at_k([["a"], ["b"]], ["a"], [1])


def test_fashioniq_average_is_the_plain_mean_of_three_categories():
    per = {
        "dress": {"R@10": 30.0, "R@50": 50.0},
        "shirt": {"R@10": 20.0, "R@50": 40.0},
        "toptee": {"R@10": 40.0, "R@50": 60.0},
    }
    assert fashioniq_average(per) == {"R@10": 30.0, "R@50": 50.0}
    with pytest.raises(InputError, match="needs the categories dress, shirt, toptee, got dress, shirt"):
        fashioniq_average({"dress": {}, "shirt": {}})


def test_cirr_removes_the_reference_and_ranks_the_subset():
    # gallery ranking (best first) for two queries
    r1 = ["ref1", "t1", "m1", "x", "m2"]  # reference first: removed, so t1 is rank 1
    r2 = ["x", "m3", "y", "ref2", "m4", "t2"]  # t2 is rank 5 after removal
    members = [["ref1", "t1", "m1", "m2", "m9", "m8"], ["ref2", "t2", "m3", "m4", "m5", "m6"]]
    out = cirr_metrics([r1, r2], ["ref1", "ref2"], ["t1", "t2"], members, ks=(1, 5), subset_ks=(1, 2, 3))
    assert out["R@1"] == 50.0 and out["R@5"] == 100.0
    # subset ranking of q2: members minus ref2 in ranked order = m3, m4, t2, (m5, m6 unranked) -> t2 is 3rd
    assert out["R_subset@1"] == 50.0 and out["R_subset@2"] == 50.0 and out["R_subset@3"] == 100.0
    assert out["Avg"] == (100.0 + 50.0) / 2


def test_cirr_without_reference_removal_would_differ():
    # the reference ranked first must not cost R@1
    out = cirr_metrics([["r", "t", "a"]], ["r"], ["t"], [["r", "t", "a", "b", "c", "d"]], ks=(1,), subset_ks=(1,))
    assert out["R@1"] == 100.0 and out["R_subset@1"] == 100.0


def test_subset_ranking_reports_unranked_members():
    ranked, missing = subset_ranking(["b", "x", "ref"], ["ref", "a", "b", "c"], "ref")
    assert ranked == ["b", "a", "c"] and missing == 2


def test_average_precision_hand_case():
    # gts {a, c, e}; ranking a x c y e: P@1=1, P@3=2/3, P@5=3/5
    r = ["a", "x", "c", "y", "e"]
    assert average_precision_at_k(r, ["a", "c", "e"], 5) == pytest.approx((1 + 2 / 3 + 3 / 5) / 3)
    # k=2 < #gt=3: divide by min(k, #gt) = 2
    assert average_precision_at_k(r, ["a", "c", "e"], 2) == pytest.approx(1 / 2)
    # one gt found at rank 2, k = 10: divide by min(10, 1) = 1
    assert average_precision_at_k(["x", "a"], ["a"], 10) == pytest.approx(1 / 2)


def test_average_precision_rejects_duplicates():
    with pytest.raises(InputError, match="duplicate prediction 'a'"):
        average_precision_at_k(["a", "b", "a"], ["a"], 5)
    with pytest.raises(InputError, match="query with no ground truth"):
        average_precision_at_k(["a"], [], 5)


def test_map_and_circo_recall_uses_target_only():
    rankings = [["g2", "t1", "x"], ["x", "y", "z"]]
    gts = [["t1", "g2"], ["t2"]]
    # q1: AP@2 = (1/1 + 2/2)/2 = 1; q2: 0 -> mAP@2 = 50
    assert map_at_k(rankings, gts, [2]) == {"mAP@2": 50.0}
    out = circo_metrics(rankings, gts, ["t1", "t2"], ks=(1, 2))
    # R@1 counts only target_img_id: q1's first hit is g2, not its target
    assert out["R@1"] == 0.0 and out["R@2"] == 50.0 and out["mAP@2"] == 50.0
    with pytest.raises(InputError, match="duplicate prediction 'x'"):
        circo_metrics([["x", "x"]], [["t"]], ["t"], ks=(2,))


def test_circo_rejects_a_duplicate_anywhere_in_the_list_like_the_official_evaluator():
    # miccunifi/CIRCO src/evaluation.py checks len(set(predictions)) over the whole list,
    # not only the scored top 50: a duplicate at rank 60 is an error naming the query
    ranking = [f"g{i}" for i in range(59)] + ["g3"]
    with pytest.raises(InputError, match="prediction list of query q7 has duplicate prediction 'g3'"):
        circo_metrics([ranking], [["g0"]], ["g0"], ks=(5, 10, 25, 50), query_ids=["q7"])
    assert circo_metrics([ranking[:-1]], [["g0"]], ["g0"], ks=(50,))["R@50"] == 100.0


def test_covr_masks_the_reference_and_means():
    rankings = [["r1", "t1", "a"], ["a", "b", "t2"], ["t3", "r3"]]
    out = covr_metrics(rankings, ["r1", "r2", "r3"], ["t1", "t2", "t3"], ks=(1, 5, 10, 50))
    # q1: t1 becomes rank 1 after masking r1; q2: rank 3; q3: rank 1
    assert out["R@1"] == pytest.approx(200 / 3) and out["R@5"] == 100.0
    assert out["meanR3"] == pytest.approx((200 / 3 + 100 + 100) / 3)
    assert out["meanR4"] == pytest.approx((200 / 3 + 300) / 4)


def test_covr_reference_equal_to_target_is_a_miss():
    # the official code masks the target too when it equals the reference
    assert covr_metrics([["t", "a"]], ["t"], ["t"], ks=(1, 5, 10, 50))["R@50"] == 0.0


def test_set_scores_hand_cases():
    assert set_scores(["a", "b", "x"], ["a", "b", "c", "d"]) == {
        "P": 2 / 3,
        "R": 0.5,
        "F1": pytest.approx(4 / 7),
        "EM": 0.0,
    }
    assert set_scores(["b", "a"], ["a", "b"]) == {"P": 1.0, "R": 1.0, "F1": 1.0, "EM": 1.0}
    assert set_scores([], ["a"]) == {"P": 0.0, "R": 0.0, "F1": 0.0, "EM": 0.0}
    with pytest.raises(InputError, match="empty ground-truth answer"):
        set_scores(["a"], [])


def test_disbench_macro_average_overall_intra_inter():
    preds = [["a", "b"], ["c"], ["x"]]
    gts = [["a", "b"], ["c", "d"], ["y"]]
    types = ["intra-event", "inter-event", "inter-event"]
    out = disbench_metrics(preds, gts, types)
    f1 = [1.0, 2 * 1 * 0.5 / 1.5, 0.0]
    assert out["F1"] == pytest.approx(100 * sum(f1) / 3)
    assert out["EM"] == pytest.approx(100 / 3)
    assert out["F1_intra"] == 100.0 and out["EM_intra"] == 100.0
    assert out["F1_inter"] == pytest.approx(100 * f1[1] / 2) and out["EM_inter"] == 0.0
    assert out["P_inter"] == 50.0 and out["R_inter"] == 25.0
    with pytest.raises(InputError, match="unknown DISBench event_type 'sideways'"):
        disbench_metrics([["a"]], [["a"]], ["sideways"])


def test_best_at_k_takes_the_best_run_per_query():
    gts = [["a", "b"], ["c"]]
    types = ["intra-event", "inter-event"]
    run1 = [["a"], ["c"]]  # F1 2/3, 1
    run2 = [["a", "b"], ["x"]]  # F1 1, 0
    out = best_at_k([run1, run2], gts, types)
    assert out["F1@2"] == 100.0 and out["EM@2"] == 100.0
    assert best_at_k([run1], gts, types)["F1@1"] == pytest.approx(100 * (2 / 3 + 1) / 2)
    with pytest.raises(InputError, match="best_at_k: no runs"):
        best_at_k([], gts, types)


def test_ranked_set_recall():
    assert ranked_set_recall([["a", "x", "b"]], [["a", "b"]], [1, 3]) == {"Recall@1": 50.0, "Recall@3": 100.0}


def test_helpers():
    assert remove_ids(["a", "b", "a"], ["a", None]) == ["b"]
    check_no_duplicates(["a", "b"])
    with pytest.raises(InputError, match="my list has duplicate prediction 'b'"):
        check_no_duplicates(["b", "b"], "my list")
