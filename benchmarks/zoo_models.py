"""The model zoo: common families built from reduced transformers configs (random weights, no hub) and
plain torch, each a factory `name() -> (module, example_inputs)` as a user hands it to
`optcli compile zoo_models.py:name`. `KINDS` groups them for the slow test (one per kind)."""
from __future__ import annotations

import torch
import transformers as tf

SEQ = 16
SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}


def _text(model: torch.nn.Module, vocab: int = 100, types: bool = False) -> tuple[torch.nn.Module, dict]:
    torch.manual_seed(1)
    ids = torch.randint(3, vocab, (2, SEQ))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if types:
        inputs["token_type_ids"] = torch.zeros_like(ids)
    return model.eval(), inputs


def _image(model: torch.nn.Module, size: int = 32, channels: int = 3) -> tuple[torch.nn.Module, dict]:
    torch.manual_seed(1)
    return model.eval(), {"pixel_values": torch.randn(2, channels, size, size)}


def _seed() -> None:
    torch.manual_seed(0)


# -- text encoders --------------------------------------------------------------------------------
def bert():
    _seed()
    return _text(tf.BertModel(tf.BertConfig(vocab_size=100, max_position_embeddings=64, **SMALL)), types=True)


def roberta():
    _seed()
    return _text(tf.RobertaModel(tf.RobertaConfig(vocab_size=100, max_position_embeddings=64, **SMALL)))


def distilbert():
    _seed()
    return _text(tf.DistilBertModel(tf.DistilBertConfig(vocab_size=100, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                                        max_position_embeddings=64)))


def albert():
    _seed()
    return _text(tf.AlbertModel(tf.AlbertConfig(vocab_size=100, embedding_size=16, max_position_embeddings=64,
                                                **SMALL)))


def electra():
    _seed()
    return _text(tf.ElectraModel(tf.ElectraConfig(vocab_size=100, embedding_size=16, max_position_embeddings=64,
                                                  **SMALL)))


def deberta_v2():
    _seed()
    return _text(tf.DebertaV2Model(tf.DebertaV2Config(vocab_size=100, max_position_embeddings=64, **SMALL)))


def mpnet():
    _seed()
    return _text(tf.MPNetModel(tf.MPNetConfig(vocab_size=100, max_position_embeddings=64, **SMALL)))


def bert_classifier():
    _seed()
    return _text(tf.BertForSequenceClassification(tf.BertConfig(vocab_size=100, max_position_embeddings=64,
                                                                num_labels=4, **SMALL)))


# -- decoder-only language models (forward pass, no KV cache) ---------------------------------------
def gpt2():
    _seed()
    return _text(tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64,
                                                  bos_token_id=0, eos_token_id=0)))


def llama():
    _seed()
    return _text(tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=100, max_position_embeddings=64,
                                                    num_key_value_heads=1, **SMALL)))


def qwen2():
    _seed()
    return _text(tf.Qwen2ForCausalLM(tf.Qwen2Config(vocab_size=100, max_position_embeddings=64,
                                                    num_key_value_heads=1, **SMALL)))


def opt():
    _seed()
    return _text(tf.OPTForCausalLM(tf.OPTConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=2, ffn_dim=64, max_position_embeddings=64,
                                                word_embed_proj_dim=32)))


# -- encoder-decoder ------------------------------------------------------------------------------
def t5():
    _seed()
    model = tf.T5Model(tf.T5Config(vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
                                   decoder_start_token_id=0))
    torch.manual_seed(1)
    ids = torch.randint(3, 100, (2, SEQ))
    return model.eval(), {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                          "decoder_input_ids": torch.randint(3, 100, (2, 8))}


def bart():
    _seed()
    model = tf.BartModel(tf.BartConfig(vocab_size=100, d_model=32, encoder_layers=1, decoder_layers=1,
                                       encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                                       decoder_ffn_dim=64, max_position_embeddings=64))
    torch.manual_seed(1)
    ids = torch.randint(3, 100, (2, SEQ))
    return model.eval(), {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                          "decoder_input_ids": torch.randint(3, 100, (2, 8))}


# -- vision CNNs ----------------------------------------------------------------------------------
def resnet():
    _seed()
    return _image(tf.ResNetModel(tf.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1])))


def convnext():
    _seed()
    return _image(tf.ConvNextModel(tf.ConvNextConfig(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2)))


def efficientnet():
    _seed()
    return _image(tf.EfficientNetModel(tf.EfficientNetConfig(image_size=32, width_coefficient=0.25,
                                                             depth_coefficient=0.25, hidden_dim=320)))


def mobilenet_v2():
    _seed()
    return _image(tf.MobileNetV2Model(tf.MobileNetV2Config(image_size=32, depth_multiplier=0.25)))


def regnet():
    _seed()
    return _image(tf.RegNetModel(tf.RegNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                                 groups_width=8)))


# -- vision transformers --------------------------------------------------------------------------
def vit():
    _seed()
    return _image(tf.ViTForImageClassification(tf.ViTConfig(image_size=32, patch_size=8, num_labels=10, **SMALL)))


def deit():
    _seed()
    return _image(tf.DeiTModel(tf.DeiTConfig(image_size=32, patch_size=8, **SMALL)))


def swin():
    _seed()
    return _image(tf.SwinModel(tf.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                             num_heads=[2, 2], window_size=4)))


def mobilevit():
    _seed()
    return _image(tf.MobileViTModel(tf.MobileViTConfig(image_size=32, hidden_sizes=[16, 24, 32],
                                                       neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
                                                       num_attention_heads=2)))


# -- detection and segmentation -------------------------------------------------------------------
def yolos():
    _seed()
    return _image(tf.YolosForObjectDetection(tf.YolosConfig(image_size=[32, 32], patch_size=8, num_detection_tokens=5,
                                                            num_labels=3, **SMALL)))


def segformer():
    _seed()
    return _image(tf.SegformerForSemanticSegmentation(tf.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2],
        decoder_hidden_size=32, num_labels=3, patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2])))


# -- speech and multimodal ------------------------------------------------------------------------
def wav2vec2():
    _seed()
    model = tf.Wav2Vec2Model(tf.Wav2Vec2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                               intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),
                                               conv_kernel=(10, 3), num_feat_extract_layers=2,
                                               num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2))
    torch.manual_seed(1)
    return model.eval(), {"input_values": torch.randn(2, 1600)}


def clip():
    _seed()
    text = {"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
            "intermediate_size": 64, "max_position_embeddings": 32}
    vision = {"image_size": 32, "patch_size": 8, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
              "intermediate_size": 64}
    model = tf.CLIPModel(tf.CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))
    torch.manual_seed(1)
    ids = torch.randint(3, 100, (2, SEQ))
    return model.eval(), {"input_ids": ids, "pixel_values": torch.randn(2, 3, 32, 32),
                          "attention_mask": torch.ones_like(ids)}


# -- plain torch ------------------------------------------------------------------------------------
class _Lstm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(16, 32, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


class _UNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()

        def block(i: int, o: int) -> torch.nn.Module:
            return torch.nn.Sequential(torch.nn.Conv2d(i, o, 3, padding=1), torch.nn.BatchNorm2d(o), torch.nn.ReLU(),
                                       torch.nn.Conv2d(o, o, 3, padding=1), torch.nn.ReLU())

        self.down1, self.down2, self.mid = block(3, 8), block(8, 16), block(16, 32)
        self.up2, self.dec2 = torch.nn.ConvTranspose2d(32, 16, 2, stride=2), block(32, 16)
        self.up1, self.dec1 = torch.nn.ConvTranspose2d(16, 8, 2, stride=2), block(16, 8)
        self.out = torch.nn.Conv2d(8, 2, 1)
        self.pool = torch.nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d1 = self.down1(x)
        d2 = self.down2(self.pool(d1))
        m = self.mid(self.pool(d2))
        u2 = self.dec2(torch.cat([self.up2(m), d2], 1))
        return self.out(self.dec1(torch.cat([self.up1(u2), d1], 1)))


def lstm():
    _seed()
    torch.manual_seed(1)
    return _Lstm().eval(), (torch.randn(2, 12, 16),)


def unet():
    _seed()
    torch.manual_seed(1)
    return _UNet().eval(), (torch.randn(2, 3, 32, 32),)


KINDS = {
    "text encoder": ["bert", "roberta", "distilbert", "albert", "electra", "deberta_v2", "mpnet", "bert_classifier"],
    "decoder LM": ["gpt2", "llama", "qwen2", "opt"],
    "encoder-decoder": ["t5", "bart"],
    "vision CNN": ["resnet", "convnext", "efficientnet", "mobilenet_v2", "regnet"],
    "vision transformer": ["vit", "deit", "swin", "mobilevit"],
    "detection / segmentation": ["yolos", "segformer"],
    "speech": ["wav2vec2"],
    "multimodal": ["clip"],
    "plain torch": ["lstm", "unet"],
}
FAMILIES = [name for names in KINDS.values() for name in names]
