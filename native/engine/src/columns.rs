//! The packed column format: a column of byte strings travels as one buffer holding the items end
//! to end, and one buffer of their lengths, each an unsigned 32-bit little-endian number. It is the
//! format of `packed_lengths` and `unpacked_lengths` in `shardgrid/core/store.py` and of a packed
//! `ScanReply` page, so the wire, the core and the engine share one codec and nothing makes an
//! object per entry.
//!
//! Numbers per entry (a TTL each, the metadata of an entry) travel the same way as unsigned
//! 64-bit little-endian numbers end to end.

use std::fmt;

/// Bytes of one packed length.
pub const LENGTH_BYTES: usize = 4;
/// Bytes of one packed 64-bit number.
pub const NUMBER_BYTES: usize = 8;

/// Input that breaks the engine's rules (a column whose lengths do not add up, a key too long, a
/// time out of range...). The call that met it changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidInput(pub String);

impl fmt::Display for InvalidInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidInput {}

/// What an `Err` of the engine's checks carries.
pub type Checked<T> = Result<T, InvalidInput>;

pub(crate) fn invalid<T>(message: String) -> Checked<T> {
    Err(InvalidInput(message))
}

/// A packed column that was checked whole: its lengths are a whole number of 4-byte lengths, at
/// most `max_items` of them, each at most `max_item_bytes`, and they add up to the buffer exactly.
/// Iterating it cannot fail.
#[derive(Debug, Clone, Copy)]
pub struct Column<'a> {
    data: &'a [u8],
    lengths: &'a [u8],
}

impl<'a> Column<'a> {
    /// Check `data` and `lengths` as a column named `what` (for the error message).
    pub fn parse(
        what: &str,
        data: &'a [u8],
        lengths: &'a [u8],
        max_items: usize,
        max_item_bytes: usize,
    ) -> Checked<Self> {
        if lengths.len() % LENGTH_BYTES != 0 {
            return invalid(format!(
                "{what}: {} bytes of lengths is not a whole number of {LENGTH_BYTES}-byte lengths",
                lengths.len()
            ));
        }
        let count = lengths.len() / LENGTH_BYTES;
        if count > max_items {
            return invalid(format!(
                "{what}: {count} entries, more than the {max_items} one call may carry"
            ));
        }
        // Each length is at most max_item_bytes (far below 2**32) and there are at most max_items
        // of them, so the sum cannot overflow a u64.
        let mut total: u64 = 0;
        for (position, raw) in lengths.chunks_exact(LENGTH_BYTES).enumerate() {
            let length = read_length(raw);
            if length > max_item_bytes {
                return invalid(format!(
                    "{what}: entry {position} is {length} bytes, more than the {max_item_bytes} allowed"
                ));
            }
            total += length as u64;
        }
        if total != data.len() as u64 {
            return invalid(format!(
                "{what}: the lengths add up to {total} bytes and the buffer holds {}",
                data.len()
            ));
        }
        Ok(Column { data, lengths })
    }

    /// How many items the column holds.
    pub fn len(&self) -> usize {
        self.lengths.len() / LENGTH_BYTES
    }

    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// The items in order.
    pub fn iter(&self) -> ColumnIter<'a> {
        ColumnIter {
            data: self.data,
            lengths: self.lengths.chunks_exact(LENGTH_BYTES),
        }
    }
}

/// The items of a checked [`Column`].
pub struct ColumnIter<'a> {
    data: &'a [u8],
    lengths: std::slice::ChunksExact<'a, u8>,
}

impl<'a> Iterator for ColumnIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let length = read_length(self.lengths.next()?);
        // `parse` checked that the lengths add up to the buffer, so the split is always in range.
        let (item, rest) = self.data.split_at(length);
        self.data = rest;
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.lengths.size_hint()
    }
}

impl ExactSizeIterator for ColumnIter<'_> {}

fn read_length(raw: &[u8]) -> usize {
    u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize
}

/// Check a column of 64-bit numbers named `what`: exactly `count` of them, each at most `max`.
pub fn parse_numbers(what: &str, packed: &[u8], count: usize, max: u64) -> Checked<Vec<u64>> {
    if packed.len() % NUMBER_BYTES != 0 {
        return invalid(format!(
            "{what}: {} bytes is not a whole number of {NUMBER_BYTES}-byte numbers",
            packed.len()
        ));
    }
    if packed.len() / NUMBER_BYTES != count {
        return invalid(format!(
            "{what}: {} numbers for {count} entries",
            packed.len() / NUMBER_BYTES
        ));
    }
    let numbers: Vec<u64> = packed
        .chunks_exact(NUMBER_BYTES)
        .map(|raw| u64::from_le_bytes(raw.try_into().expect("chunks_exact gives 8 bytes")))
        .collect();
    if let Some(position) = numbers.iter().position(|&n| n > max) {
        return invalid(format!(
            "{what}: entry {position} is {}, more than the {max} allowed",
            numbers[position]
        ));
    }
    Ok(numbers)
}

/// A column being written: items end to end and their lengths, in the packed format.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Packed {
    pub data: Vec<u8>,
    pub lengths: Vec<u8>,
}

impl Packed {
    /// Room for `items` items of `data_bytes` bytes in all.
    pub fn with_capacity(items: usize, data_bytes: usize) -> Self {
        Packed {
            data: Vec::with_capacity(data_bytes),
            lengths: Vec::with_capacity(items * LENGTH_BYTES),
        }
    }

    /// Append an item. Its length must fit 32 bits: the engine holds nothing over
    /// `MAX_VALUE_BYTES`, and callers that pack items of their own check them first.
    pub fn push(&mut self, item: &[u8]) {
        let length = u32::try_from(item.len()).expect("a packed item's length fits 32 bits");
        self.data.extend_from_slice(item);
        self.lengths.extend_from_slice(&length.to_le_bytes());
    }

    /// Append an empty item (the place of an absent entry; the presence mask tells them apart).
    pub fn push_empty(&mut self) {
        self.lengths.extend_from_slice(&0u32.to_le_bytes());
    }

    pub fn len(&self) -> usize {
        self.lengths.len() / LENGTH_BYTES
    }

    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }
}

/// `items` in the packed format (for tests and callers that hold separate items).
pub fn pack<'a>(items: impl IntoIterator<Item = &'a [u8]>) -> Packed {
    let mut packed = Packed::default();
    for item in items {
        packed.push(item);
    }
    packed
}

/// `numbers` as unsigned 64-bit little-endian numbers end to end.
pub fn pack_numbers(numbers: &[u64]) -> Vec<u8> {
    numbers.iter().flat_map(|n| n.to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lengths(sizes: &[u32]) -> Vec<u8> {
        sizes.iter().flat_map(|s| s.to_le_bytes()).collect()
    }

    #[test]
    fn a_packed_column_reads_back_item_by_item() {
        let items: [&[u8]; 4] = [b"ab", b"", b"cde", b"\x00"];
        let packed = pack(items);
        assert_eq!(packed.data, b"abcde\x00");
        assert_eq!(packed.lengths, lengths(&[2, 0, 3, 1]));
        let column = Column::parse("keys", &packed.data, &packed.lengths, 10, 10).unwrap();
        assert_eq!(column.len(), 4);
        assert_eq!(column.iter().collect::<Vec<_>>(), items);
    }

    #[test]
    fn empty_items_and_an_empty_column_are_columns() {
        let two_empty = lengths(&[0, 0]);
        let column = Column::parse("keys", b"", &two_empty, 10, 10).unwrap();
        assert_eq!(column.iter().collect::<Vec<_>>(), vec![b"" as &[u8], b""]);
        let none = Column::parse("keys", b"", b"", 10, 10).unwrap();
        assert!(none.is_empty());
        assert_eq!(none.iter().count(), 0);
    }

    #[test]
    fn lengths_that_do_not_add_up_to_the_buffer_are_refused() {
        let short = Column::parse("keys", b"abc", &lengths(&[1, 1]), 10, 10).unwrap_err();
        assert_eq!(short.0, "keys: the lengths add up to 2 bytes and the buffer holds 3");
        let long = Column::parse("keys", b"abc", &lengths(&[2, 2]), 10, 10).unwrap_err();
        assert_eq!(long.0, "keys: the lengths add up to 4 bytes and the buffer holds 3");
        assert!(Column::parse("keys", b"abc", b"", 10, 10).is_err());
    }

    #[test]
    fn a_truncated_length_buffer_is_refused() {
        let mut truncated = lengths(&[1, 2]);
        truncated.pop();
        let error = Column::parse("values", b"abc", &truncated, 10, 10).unwrap_err();
        assert_eq!(
            error.0,
            "values: 7 bytes of lengths is not a whole number of 4-byte lengths"
        );
    }

    #[test]
    fn an_item_at_the_limit_is_taken_and_one_past_it_refused() {
        let at = vec![7u8; 16];
        assert!(Column::parse("keys", &at, &lengths(&[16]), 10, 16).is_ok());
        let past = vec![7u8; 17];
        let error = Column::parse("keys", &past, &lengths(&[17]), 10, 16).unwrap_err();
        assert_eq!(error.0, "keys: entry 0 is 17 bytes, more than the 16 allowed");
    }

    #[test]
    fn a_length_near_u32_max_is_refused_without_overflow() {
        let error = Column::parse("keys", b"", &lengths(&[u32::MAX, 1]), 10, usize::MAX).unwrap_err();
        assert_eq!(
            error.0,
            format!(
                "keys: the lengths add up to {} bytes and the buffer holds 0",
                u32::MAX as u64 + 1
            )
        );
    }

    #[test]
    fn more_items_than_allowed_are_refused_before_any_is_read() {
        let error = Column::parse("keys", b"", &lengths(&[0; 3]), 2, 10).unwrap_err();
        assert_eq!(error.0, "keys: 3 entries, more than the 2 one call may carry");
    }

    #[test]
    fn number_columns_are_checked_for_count_shape_and_bound() {
        assert_eq!(
            parse_numbers("ttls_ms", &pack_numbers(&[1, 0, 5]), 3, 5).unwrap(),
            vec![1, 0, 5]
        );
        assert!(parse_numbers("ttls_ms", &pack_numbers(&[1, 6]), 2, 5).is_err());
        assert!(parse_numbers("ttls_ms", &pack_numbers(&[1]), 2, 5).is_err());
        assert!(parse_numbers("ttls_ms", &[0u8; 9], 1, 5).is_err());
        assert_eq!(parse_numbers("ttls_ms", b"", 0, 5).unwrap(), Vec::<u64>::new());
    }
}
