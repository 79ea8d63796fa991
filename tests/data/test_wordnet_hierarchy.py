"""WordNet's noun hierarchy: a hand-written data.noun parses to the expected pointers, and the
installed WordNet 3.0 places dog under animal and mammal, oak under plant."""

from pathlib import Path

import pytest

from repr_jax.data import wordnet_hierarchy as W

# Four-plus synsets in data.noun's format: a license line, a hexadecimal w_cnt (0a would be ten),
# a lexical (+, verb) pointer that is not a hypernym, an instance hypernym (@i), a multiword
# lemma, and "dog" in two lexicographer files (05 animal, 13 food).
DATA_NOUN = """\
  1 This software and database is being provided to you, the LICENSEE, by a license header.
00000010 03 n 01 entity 0 002 ~ 00000100 n 0000 ~ 00000500 n 0000 | that which exists
00000100 05 n 02 animal 0 beast 0 003 @ 00000010 n 0000 ~ 00000200 n 0000 ~ 00000400 n 0000 | a living organism
00000200 05 n 02 Dog 0 guard_dog 1 003 @ 00000100 n 0000 + 01234567 v 0101 ~i 00000300 n 0000 | a canine
00000300 05 n 01 Rex 0 001 @i 00000200 n 0000 | a famous dog
00000400 05 n 01 cat 0 001 @ 00000100 n 0000 | a feline
00000500 13 n 02 hot_dog 0 dog 0 001 @ 00000010 n 0000 | a sausage
"""


@pytest.fixture
def tiny(tmp_path):
    (tmp_path / "data.noun").write_text(DATA_NOUN)
    return W.noun_hierarchy(str(tmp_path))


def test_a_hand_written_data_noun_parses_to_its_pointers(tiny):
    s = tiny.synsets
    assert sorted(s) == [10, 100, 200, 300, 400, 500]
    assert s[10] == W.Synset(10, 3, ("entity",), (), ())
    assert s[100].lemmas == ("animal", "beast") and s[100].hypernyms == (10,)
    assert s[200].lemmas == ("Dog", "guard dog") and s[200].hypernyms == (100,)  # + ignored
    assert s[300].hypernyms == () and s[300].instance_hypernyms == (200,)
    assert s[300].parents == (200,)
    assert s[100].category == "noun.animal" and s[500].category == "noun.food"
    assert s[10].category == "noun.Tops"
    assert dict(tiny.hyponyms) == {10: (100, 500), 100: (200, 400), 200: (300,)}
    # Without index.noun the senses follow data.noun's order.
    assert tiny.senses["dog"] == (200, 500)
    assert W.synset(tiny, "dog.n.02").offset == 500 and W.synset(tiny, "dog").offset == 200


def test_closures_words_and_categories_of_the_tiny_hierarchy(tiny):
    assert W.descendants(tiny, 10) == {100, 200, 300, 400, 500}
    assert W.descendants(tiny, "animal") == {200, 300, 400}
    assert W.descendants(tiny, "rex") == set()
    assert W.hypernym_closure(tiny, "rex.n.01") == [200, 100, 10]
    assert W.category_words(tiny, "animal") == {"animal", "beast", "dog", "rex", "cat"}
    assert W.category_words(tiny, "animal", single_word=False) == {
        "animal", "beast", "dog", "guard dog", "rex", "cat"}
    # "dog" is in noun.animal and noun.food: dropped; multiword lemmas left out.
    assert W.lexfile_categories(tiny) == {"noun.Tops": ["entity"],
                                          "noun.animal": ["animal", "beast", "cat", "rex"]}
    with pytest.raises(ValueError, match="senses 1..2"):
        W.synset(tiny, "dog.n.03")
    with pytest.raises(ValueError, match="no noun sense"):
        W.synset(tiny, "unicorn")


def test_a_missing_database_is_one_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="wordnet-base"):
        W.noun_hierarchy(str(tmp_path))


real = pytest.mark.skipif(not Path(W.WORDNET_DIR, "data.noun").is_file(),
                          reason="WordNet 3.0 absent: apt-get install wordnet-base")


@pytest.fixture(scope="module")
def wordnet():
    return W.noun_hierarchy()


@real
def test_dog_is_an_animal_and_a_mammal_and_oak_a_plant(wordnet):
    dog = W.synset(wordnet, "dog.n.01")
    assert "dog" in dog.lemmas and dog.category == "noun.animal"
    chain = {lemma for o in W.hypernym_closure(wordnet, "dog.n.01")
             for lemma in wordnet.synsets[o].lemmas}
    assert {"canine", "carnivore", "mammal", "animal"} <= chain
    animals, mammals = W.category_words(wordnet, "animal.n.01"), W.category_words(wordnet, "mammal")
    plants = W.category_words(wordnet, "plant.n.02")  # plant.n.01 is the factory
    assert W.synset(wordnet, "plant.n.02").lemmas[0] == "plant"
    assert "dog" in animals and "dog" in mammals and "dog" not in plants
    assert "oak" in plants and "oak" not in animals
    assert mammals < animals
    assert dog.offset in W.descendants(wordnet, "animal.n.01")


@real
def test_the_noun_lexicographer_files_give_unambiguous_labels(wordnet):
    cats = W.lexfile_categories(wordnet)
    assert len(cats) in (25, 26) and set(cats) <= set(W.NOUN_LEXFILES.values())
    seen = [w for words in cats.values() for w in words]
    assert len(seen) == len(set(seen))  # one label a word
    assert all(" " not in w and w == w.lower() for w in seen)
    assert "oak" in cats["noun.plant"] and "giraffe" in cats["noun.animal"]
