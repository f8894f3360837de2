//! The training data: a deterministic synthetic corpus of printable ASCII
//! text, generated from `--seed` by a small probabilistic grammar.
//!
//! The grammar: a seed-chosen set of syllables (a consonant or two and a
//! vowel, sometimes a closing consonant), a lexicon of words of one to
//! three syllables drawn with Zipf-like frequencies, sentences of three to
//! ten words (capitalised, commas now and then, ending in `.`, `?` or `!`),
//! and paragraphs of a few sentences ending in a newline. The text is one
//! long stream of [`TRAIN_BYTES`] bytes for training followed by
//! [`EVAL_BYTES`] for evaluation (at least four samples' worth of each);
//! sample `i` of a split is the `seq_length + 1` bytes starting at
//! `i × seq_length` in its region (wrapping around): the inputs are the
//! first `seq_length`, the targets the next byte of each.
//!
//! The corpus's single-byte (unigram) entropy, in nats like the loss, is the
//! loss of the best model that ignores context; the simulator prints it at
//! startup, and a model that learns which byte follows which ends below it.

use crate::model::{Rng, Split, stream};

/// Bytes of the training region (at least four samples).
pub(crate) const TRAIN_BYTES: usize = 64 * 1024;
/// Bytes of the evaluation region (at least four samples).
pub(crate) const EVAL_BYTES: usize = 16 * 1024;

/// Syllables in the grammar.
const SYLLABLES: usize = 24;
/// Words in the lexicon.
const WORDS: usize = 96;

/// The synthetic text of a run and the cutting of samples out of it.
#[derive(Debug, Default)]
pub(crate) struct Corpus {
    text: Vec<u8>,
    train: usize,
    seq: usize,
}

impl Corpus {
    /// The corpus of `seed`, cut into samples of `seq` bytes.
    pub(crate) fn new(seed: u64, seq: usize) -> Corpus {
        let train = TRAIN_BYTES.max(4 * (seq + 1));
        let eval = EVAL_BYTES.max(4 * (seq + 1));
        let text = generate(seed, train + eval);
        Corpus { text, train, seq }
    }

    /// The training region.
    pub(crate) fn train_text(&self) -> &[u8] {
        &self.text[..self.train]
    }

    /// The inputs and targets (`count × seq` bytes each) of samples
    /// `first..first + count` of `split`.
    pub(crate) fn batch(&self, split: Split, first: u64, count: u64) -> (Vec<u8>, Vec<u8>) {
        let region = match split {
            Split::Train => &self.text[..self.train],
            Split::Eval => &self.text[self.train..],
        };
        let (seq, len) = (self.seq as u64, region.len() as u64);
        let mut inputs = Vec::with_capacity((count * seq) as usize);
        let mut targets = Vec::with_capacity((count * seq) as usize);
        for sample in first..first + count {
            let start = sample.wrapping_mul(seq) % len;
            let at = |offset: u64| region[((start + offset) % len) as usize];
            inputs.extend((0..seq).map(at));
            targets.extend((1..=seq).map(at));
        }
        (inputs, targets)
    }

    /// The single-byte (unigram) entropy of the training text, in nats.
    pub(crate) fn unigram_entropy_nats(&self) -> f64 {
        unigram_entropy_nats(self.train_text())
    }
}

/// The entropy of the byte frequencies of `text`, in nats.
pub(crate) fn unigram_entropy_nats(text: &[u8]) -> f64 {
    let mut counts = [0_u64; 256];
    text.iter().for_each(|&b| counts[usize::from(b)] += 1);
    let total = text.len().max(1) as f64;
    counts.iter().filter(|&&c| c > 0).map(|&c| c as f64 / total).map(|p| -p * p.ln()).sum()
}

/// Whether `byte` is printable ASCII or a newline: the corpus's alphabet,
/// and what sampling may return.
pub(crate) fn is_printable(byte: u8) -> bool {
    (0x20..=0x7e).contains(&byte) || byte == b'\n'
}

/// `len` bytes of text from the grammar of `seed`.
fn generate(seed: u64, len: usize) -> Vec<u8> {
    const ONSETS: [&str; 18] =
        ["b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "st", "tr", "sh"];
    const VOWELS: [&str; 6] = ["a", "e", "i", "o", "u", "ai"];
    const CODAS: [&str; 5] = ["n", "r", "s", "l", "m"];
    let mut rng = Rng::new(seed, stream::CORPUS, 0);
    let syllables: Vec<String> = (0..SYLLABLES)
        .map(|_| {
            let mut syllable = String::from(ONSETS[rng.below(ONSETS.len())]);
            syllable.push_str(VOWELS[rng.below(VOWELS.len())]);
            if rng.below(3) == 0 {
                syllable.push_str(CODAS[rng.below(CODAS.len())]);
            }
            syllable
        })
        .collect();
    let words: Vec<String> =
        (0..WORDS).map(|_| (0..1 + rng.below(3)).map(|_| syllables[rng.below(SYLLABLES)].as_str()).collect()).collect();
    // Zipf-like: word `r` has weight 1 / (r + 1).
    let cumulative: Vec<f32> = (0..WORDS)
        .scan(0.0_f32, |sum, r| {
            *sum += 1.0 / (r + 1) as f32;
            Some(*sum)
        })
        .collect();
    let total = cumulative[WORDS - 1];
    let mut text = Vec::with_capacity(len + 128);
    let mut sentences_left = 0;
    while text.len() < len {
        if sentences_left == 0 {
            sentences_left = 2 + rng.below(4);
        }
        let count = 3 + rng.below(8);
        for index in 0..count {
            let pick = rng.unit() * total;
            let word = words[cumulative.partition_point(|&c| c <= pick).min(WORDS - 1)].as_bytes();
            if index == 0 {
                text.push(word[0].to_ascii_uppercase());
                text.extend_from_slice(&word[1..]);
            } else {
                text.extend_from_slice(word);
            }
            if index + 1 < count {
                if rng.below(8) == 0 {
                    text.push(b',');
                }
                text.push(b' ');
            }
        }
        text.push(match rng.below(6) {
            0 => b'?',
            1 => b'!',
            _ => b'.',
        });
        sentences_left -= 1;
        text.push(if sentences_left == 0 { b'\n' } else { b' ' });
    }
    text.truncate(len);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corpus_is_printable_text_fixed_by_the_seed() {
        let corpus = Corpus::new(1234, 32);
        assert_eq!(corpus.text, Corpus::new(1234, 32).text);
        assert_ne!(corpus.text, Corpus::new(1235, 32).text);
        assert!(corpus.text.iter().all(|&b| is_printable(b)));
        let text = String::from_utf8_lossy(&corpus.text[..400]).into_owned();
        assert!(
            text.contains(". ") && text.contains('\n') && text.chars().next().unwrap().is_ascii_uppercase(),
            "{text}"
        );
        let entropy = corpus.unigram_entropy_nats();
        // Text of about 25 letters and punctuation: between 2 and 3.5 nats.
        assert!((2.0..3.5).contains(&entropy), "{entropy}");
    }

    #[test]
    fn targets_are_the_inputs_shifted_by_one_byte() {
        let corpus = Corpus::new(7, 16);
        let (inputs, targets) = corpus.batch(Split::Train, 3, 2);
        assert_eq!((inputs.len(), targets.len()), (32, 32));
        assert_eq!(&inputs[1..16], &targets[..15]);
        assert_eq!(&inputs[..16], &corpus.text[48..64]);
        assert_eq!(targets[15], corpus.text[64]);
        // The evaluation split comes from text training never sees.
        let (eval, _) = corpus.batch(Split::Eval, 0, 1);
        assert_eq!(&eval[..], &corpus.text[TRAIN_BYTES..TRAIN_BYTES + 16]);
    }

    #[test]
    fn entropy_is_zero_for_one_byte_and_ln_2_for_two_equally_frequent() {
        assert_eq!(unigram_entropy_nats(b"aaaa"), 0.0);
        assert!((unigram_entropy_nats(b"abab") - std::f64::consts::LN_2).abs() < 1e-12);
    }
}
