"""The launch's warning for a first primary component that a minority may start
(``actors.group.expected_size_warning``): exactly when two disjoint parts of the members
launched could each reach ``primary__expected_size``."""
from raygroups.actors.group import expected_size_warning


def test_a_majority_is_never_warned_of():
    for launched in range(1, 12):
        for expected in range(launched // 2 + 1, launched + 2):
            assert expected_size_warning(expected, launched) is None, (expected, launched)


def test_less_than_a_majority_is_warned_of_with_the_majority_it_takes():
    for launched in range(2, 12):
        for expected in range(1, launched // 2 + 1):
            text = expected_size_warning(expected, launched)
            assert text is not None, (expected, launched)
            assert f"primary__expected_size={expected} with {launched} members" in text
            assert f"a majority is {launched // 2 + 1}" in text
