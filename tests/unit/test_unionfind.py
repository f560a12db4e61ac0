import itertools

from hypothesis import given
from hypothesis import strategies as st

from graphir.unionfind import DisjointSets


def test_smallest_member_represents_its_class():
    sets: DisjointSets[str] = DisjointSets()
    sets.union("c", "b")
    sets.union("d", "c")
    sets.union("x", "y")
    assert {sets.find(k) for k in "bcd"} == {"b"}
    assert sets.find("y") == "x"
    assert "a" not in sets and "d" in sets and len(sets) == 5
    assert sets.find("a") == "a" and "a" in sets  # a new key joins as its own class


def test_custom_order_chooses_the_representative():
    rank = {"late": 0, "early": 1}
    sets: DisjointSets[str] = DisjointSets(order=rank.__getitem__)
    assert sets.union("early", "late") == "late"


@given(st.lists(st.tuples(st.integers(0, 15), st.integers(0, 15)), max_size=30))
def test_classes_do_not_depend_on_the_union_order(pairs):
    def classes(order):
        sets: DisjointSets[int] = DisjointSets()
        for a, b in order:
            sets.union(a, b)
        return {k: sets.find(k) for k in range(16) if k in sets}

    expected = classes(pairs)
    for permuted in itertools.islice(itertools.permutations(pairs), 3):
        assert classes(list(reversed(permuted))) == expected
    # the representative is the class minimum
    for root in set(expected.values()):
        assert root == min(j for j, r in expected.items() if r == root)
