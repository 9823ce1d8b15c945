"""Token-in/token-out chat formatting: each turn's prompt extends the previous one exactly."""
import pytest

from rollart.rollout.chat import ChatFormat, ChatTemplateError
from rollart.rollout.scripted import ByteTokenizer


def test_incremental_tokens_equal_the_template_of_the_whole_conversation(tokenizer):
    chat = ChatFormat(tokenizer, "sys prompt")
    ids = chat.first_prompt("obs 1")
    out1 = tokenizer.encode("L") + [tokenizer.eos_token_id]  # stopped on <|im_end|>
    ids += out1 + chat.next_turn("obs 2", out1)
    out2 = tokenizer.encode("R")  # hit max_tokens: no end token generated
    ids += out2 + chat.next_turn("obs 3", out2)
    messages = [{"role": "system", "content": "sys prompt"}, {"role": "user", "content": "obs 1"},
                {"role": "assistant", "content": "L"}, {"role": "user", "content": "obs 2"},
                {"role": "assistant", "content": "R"}, {"role": "user", "content": "obs 3"}]
    assert ids == tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    assert chat.stop_token_ids == [tokenizer.eos_token_id]
    assert chat.action_text(out1) == "L"


def test_template_that_is_not_prefix_stable_is_refused():
    class Rewrites(ByteTokenizer):
        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
            return f"{len(messages)} turns: " + super().apply_chat_template(messages, False, add_generation_prompt)

    with pytest.raises(ChatTemplateError, match="prefix"):
        ChatFormat(Rewrites())


def test_real_tokenizer_from_make_tiny_model_is_extended_token_in_token_out(tiny_model_dir):
    from rollart.models import load_tokenizer

    tok = load_tokenizer(tiny_model_dir)
    chat = ChatFormat(tok, "Move to G avoiding H.")
    ids = chat.first_prompt("PFFF\nFHFH")
    out = tok.encode("D", add_special_tokens=False) + [chat.stop_token_ids[0]]
    ids += out + chat.next_turn("SFFF\nPHFH", out)
    messages = [{"role": "system", "content": "Move to G avoiding H."}, {"role": "user", "content": "PFFF\nFHFH"},
                {"role": "assistant", "content": "D"}, {"role": "user", "content": "SFFF\nPHFH"}]
    full = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tok.decode(ids) == full
    assert tok.convert_ids_to_tokens(chat.stop_token_ids[:1]) == ["<|im_end|>"]


def test_byte_tokenizer_round_trips_with_and_without_special_tokens():
    tok = ByteTokenizer()
    plain = "grid é\nPFFF"
    assert tok.encode(plain) == list(plain.encode()) and tok.decode(tok.encode(plain)) == plain
    text = "<|im_start|>user\nobs <| not special<|im_end|>\n"
    ids = tok.encode(text)
    assert ids[0] == tok.special_ids["<|im_start|>"] and tok.special_ids["<|im_end|>"] in ids
    assert tok.decode(ids) == text
    assert tok.decode(ids, skip_special_tokens=True) == "user\nobs <| not special\n"
    assert tok.decode([]) == ""


def test_scripted_policy_reads_the_last_user_message_like_the_text_rule():
    from rollart.rollout.scripted import ScriptedPolicy, last_user_message

    tok = ByteTokenizer()
    policy = ScriptedPolicy(tok, lambda tid, obs: "D")
    for system in ("", "sys prompt"):
        chat = ChatFormat(tok, system)
        ids = chat.first_prompt("grid 1\nPFFF")
        assert policy.last_user_message(ids) == "grid 1\nPFFF"
        for obs in ("grid é 2", "has <|endoftext|> inside", ""):  # a special token inside: the text way
            ids = ids + [68, tok.eos_token_id] + chat.next_turn(obs, [68, tok.eos_token_id])
            assert policy.last_user_message(ids) == last_user_message(tok.decode(ids)) == obs
