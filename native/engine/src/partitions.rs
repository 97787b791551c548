//! Keys to partitions, as Hazelcast computes them, and a batch grouped by partition.
//!
//! A serialized key is hashed with MurmurHash3_x86_32 (seed `0x01000193`) and the signed hash is
//! folded into `0..partition_count` as Hazelcast folds it (`i32::MIN` to 0, otherwise its absolute
//! value modulo the count): the same function as `shardgrid.core.hashing`, which
//! `tests/engine/test_partitions.py` checks key by key against `mmh3`.
//!
//! A member serves a request a partition at a time, and a partition's keys are served as one run
//! of the request's columns: [`group`] finds the runs. Clients send each partition's keys side
//! by side (the order that makes every run a slice of the columns); a request in another order is
//! served all the same, through the stable order [`Grouping::order`] that brings them together.

use crate::columns::Column;

/// Hazelcast's seed for partition hashing.
pub const MURMUR_SEED: u32 = 0x0100_0193;

/// MurmurHash3_x86_32 of `data` with `seed` (Austin Appleby's public-domain algorithm).
pub fn murmur3_x86_32(data: &[u8], seed: u32) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut hash = seed;
    let blocks = data.chunks_exact(4);
    let tail = blocks.remainder();
    for block in blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        hash ^= k;
        hash = hash.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    if !tail.is_empty() {
        let mut k: u32 = 0;
        for (shift, &byte) in tail.iter().enumerate() {
            k |= u32::from(byte) << (8 * shift);
        }
        hash ^= k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
    }
    // The length is folded in modulo 2**32, as the reference implementation's int does.
    hash ^= data.len() as u32;
    hash ^= hash >> 16;
    hash = hash.wrapping_mul(0x85eb_ca6b);
    hash ^= hash >> 13;
    hash = hash.wrapping_mul(0xc2b2_ae35);
    hash ^ (hash >> 16)
}

/// The partition of a serialized key among `partition_count` (at least 1) partitions.
pub fn partition_of(key: &[u8], partition_count: u32) -> u32 {
    fold(murmur3_x86_32(key, MURMUR_SEED) as i32, partition_count)
}

/// Hazelcast's fold of a signed hash into `0..partition_count`: `i32::MIN` (whose absolute value
/// does not fit) to 0, any other hash its absolute value modulo the count.
pub fn fold(hash: i32, partition_count: u32) -> u32 {
    if hash == i32::MIN {
        0
    } else {
        hash.unsigned_abs() % partition_count
    }
}

/// The partition of each key of a checked column.
pub fn partition_ids(keys: &Column<'_>, partition_count: u32) -> Vec<u32> {
    keys.iter().map(|key| partition_of(key, partition_count)).collect()
}

/// One partition's keys in a batch: positions `start..end` of the batch in the order of
/// [`Grouping::order`] (of the batch itself when there is none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    pub partition_id: u32,
    pub start: usize,
    pub end: usize,
}

/// A batch's keys grouped by partition, the groups in the order their partitions first come and
/// each group's keys in batch order. `order` is None when every partition's keys already come
/// side by side; otherwise it lists the batch's positions in the order that brings them together
/// (a stable reordering: the groups' positions refer to it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grouping {
    pub groups: Vec<Group>,
    pub order: Option<Vec<u32>>,
}

/// Group positions by their partition ids (`pids[i]` is position i's).
pub fn group(pids: &[u32]) -> Grouping {
    let mut groups: Vec<Group> = Vec::new();
    for (position, &pid) in pids.iter().enumerate() {
        match groups.last_mut() {
            Some(last) if last.partition_id == pid => last.end = position + 1,
            _ => groups.push(Group {
                partition_id: pid,
                start: position,
                end: position + 1,
            }),
        }
    }
    // A partition met in two runs came back after another one: its keys are not side by side.
    // (Runs are few next to keys, but keys in no order make a run each: a sorted list of the
    // partitions keeps every look-up below logarithmic.)
    let mut met: Vec<u32> = groups.iter().map(|g| g.partition_id).collect();
    met.sort_unstable();
    let scattered = met.windows(2).any(|pair| pair[0] == pair[1]);
    if !scattered {
        return Grouping { groups, order: None };
    }
    // Stable counting sort by the rank of each partition's first appearance.
    met.dedup();
    let mut rank_of_first: Vec<(u32, usize)> = Vec::with_capacity(met.len());
    let mut seen = vec![false; met.len()];
    for group in &groups {
        let slot = met
            .binary_search(&group.partition_id)
            .expect("every group's partition was met");
        if !seen[slot] {
            seen[slot] = true;
            rank_of_first.push((group.partition_id, slot));
        }
    }
    let mut rank = vec![0usize; met.len()];
    for (index, &(_, slot)) in rank_of_first.iter().enumerate() {
        rank[slot] = index;
    }
    let mut counts = vec![0usize; rank_of_first.len()];
    let ranks: Vec<usize> = pids
        .iter()
        .map(|pid| rank[met.binary_search(pid).expect("every position's partition was met")])
        .collect();
    for &r in &ranks {
        counts[r] += 1;
    }
    let mut starts = Vec::with_capacity(counts.len());
    let mut total = 0;
    for &count in &counts {
        starts.push(total);
        total += count;
    }
    let mut next = starts.clone();
    let mut order = vec![0u32; pids.len()];
    for (position, &r) in ranks.iter().enumerate() {
        order[next[r]] = position as u32;
        next[r] += 1;
    }
    let groups = rank_of_first
        .iter()
        .enumerate()
        .map(|(r, &(pid, _))| Group {
            partition_id: pid,
            start: starts[r],
            end: starts[r] + counts[r],
        })
        .collect();
    Grouping {
        groups,
        order: Some(order),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columns::pack;

    #[test]
    fn murmur3_matches_the_reference_vectors() {
        // Published test vectors of MurmurHash3_x86_32.
        assert_eq!(murmur3_x86_32(b"", 0), 0);
        assert_eq!(murmur3_x86_32(b"", 1), 0x514e_28b7);
        assert_eq!(murmur3_x86_32(b"", 0xffff_ffff), 0x81f1_6f39);
        assert_eq!(murmur3_x86_32(&[0xff, 0xff, 0xff, 0xff], 0), 0x7629_3b50);
        assert_eq!(murmur3_x86_32(&[0x21, 0x43, 0x65, 0x87], 0), 0xf55b_516b);
        assert_eq!(murmur3_x86_32(&[0x21, 0x43, 0x65], 0), 0x7e4a_8634);
        assert_eq!(murmur3_x86_32(&[0x21, 0x43], 0), 0xa0f7_b07a);
        assert_eq!(murmur3_x86_32(&[0x21], 0), 0x7266_1cf4);
        assert_eq!(murmur3_x86_32(b"Hello, world!", 1234), 0xfaf6_cdb3);
        assert_eq!(
            murmur3_x86_32(b"The quick brown fox jumps over the lazy dog", 0x9747_b28c),
            0x2fa8_26cd
        );
    }

    #[test]
    fn partitions_fold_as_hazelcast_folds_them() {
        // A key whose hash is i32::MIN lands in partition 0; others by |hash| mod count.
        for key in [b"a".as_slice(), b"key-1", b"", b"\x00\x00\x00\x05ada"] {
            let hash = murmur3_x86_32(key, MURMUR_SEED) as i32;
            assert_eq!(partition_of(key, 271), hash.unsigned_abs() % 271);
        }
        assert_eq!(partition_of(b"anything", 1), 0);
        assert_eq!(fold(i32::MIN, 271), 0);
        assert_eq!(fold(i32::MIN + 1, 271), (i32::MAX as u32) % 271);
        assert_eq!(fold(-5, 3), 2);
        let packed = pack([b"a".as_slice(), b"b"]);
        let column = Column::parse("keys", &packed.data, &packed.lengths, 10, 10).unwrap();
        assert_eq!(
            partition_ids(&column, 271),
            vec![partition_of(b"a", 271), partition_of(b"b", 271)]
        );
    }

    #[test]
    fn side_by_side_partitions_need_no_reordering() {
        let grouping = group(&[3, 3, 1, 7, 7, 7]);
        assert_eq!(grouping.order, None);
        let spans: Vec<_> = grouping
            .groups
            .iter()
            .map(|g| (g.partition_id, g.start, g.end))
            .collect();
        assert_eq!(spans, vec![(3, 0, 2), (1, 2, 3), (7, 3, 6)]);
        assert_eq!(
            group(&[]),
            Grouping {
                groups: vec![],
                order: None
            }
        );
    }

    #[test]
    fn scattered_partitions_are_brought_together_stably() {
        let grouping = group(&[5, 2, 5, 9, 2, 5]);
        assert_eq!(grouping.order, Some(vec![0, 2, 5, 1, 4, 3]));
        let spans: Vec<_> = grouping
            .groups
            .iter()
            .map(|g| (g.partition_id, g.start, g.end))
            .collect();
        assert_eq!(spans, vec![(5, 0, 3), (2, 3, 5), (9, 5, 6)]);
    }
}
