//! The one seeding routine of the executed additivity check.

use cairn_core::{epoch_id, EpochStore, Error, Event, EventId, ForeignEpoch, SpaceId};

/// Fills an epoch log through cairn's real write paths, so the additivity check sees the rows
/// the real code writes: multi-event appends to three spaces (keyed and unkeyed events, JSON,
/// text and binary payloads), an import of a sibling epoch that forks one space, a repair, and
/// an append that merges the fork.
///
/// Every engine calls it, on every check, whenever the throwaway store holds cairn's epoch log
/// (it always does: an application's set is checked on top of cairn's own set, see
/// [`super::AdditivityEngine`]). It writes only through `store`, so both engines seed the same
/// logical content; the spaces are fixed names, so it must run once per throwaway store.
///
/// # Errors
/// Whatever `store` returns; a store freshly migrated by the runner accepts every write.
pub async fn seed_epoch_log(store: &dyn EpochStore) -> Result<(), Error> {
    let space = |name: &str| SpaceId::new(name.as_bytes().to_vec());
    let (forked, linear, single) = (
        space("additivity-forked")?,
        space("additivity-linear")?,
        space("additivity-single")?,
    );
    let json = |n: u8| format!("{{\"n\":{n},\"tag\":\"seed\",\"y\":[true,null]}}").into_bytes();
    let binary: &[u8] = b"\xff\x00\xfe";

    let first = store
        .append(
            &forked,
            vec![
                Event::new("seed.json", json(1)),
                Event::with_key("seed.keyed", b"key-1".to_vec(), binary.to_vec()),
                Event::new("seed.text", b"plain text, not JSON".to_vec()),
            ],
        )
        .await?;
    store
        .append(
            &forked,
            vec![Event::with_key("seed.keyed", b"key-2".to_vec(), json(2))],
        )
        .await?;
    // A sibling of the second epoch, as another node would have written it: importing it forks
    // the space, the repair collapses the cache onto both heads, and the next append merges.
    let events = vec![
        Event::new("seed.foreign", binary.to_vec()),
        Event::with_key("seed.foreign", b"\x00k".to_vec(), json(3)),
    ];
    let ids: Vec<EventId> = events.iter().map(Event::id).collect();
    let parents = vec![first.id];
    store
        .import(ForeignEpoch {
            space: forked.clone(),
            id: epoch_id(&forked, &parents, &ids),
            parents,
            events,
        })
        .await?;
    store.repair_heads(&forked).await?;
    store
        .append(&forked, vec![Event::new("seed.merge", json(4))])
        .await?;

    for i in 0..3u8 {
        store
            .append(
                &linear,
                vec![
                    Event::new("seed.json", json(10 + i)),
                    Event::with_key("seed.keyed", vec![i], json(20 + i)),
                    Event::new("seed.bin", vec![i; 40]),
                ],
            )
            .await?;
    }
    store
        .append(&single, vec![Event::new("seed.one", b"[1,2,3]".to_vec())])
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_core::{EpochDiagnostics, MemoryStore};

    #[tokio::test]
    async fn seed_writes_three_spaces_with_a_merged_fork() {
        let store = MemoryStore::new();
        seed_epoch_log(&store).await.unwrap();
        let spaces = store.list_spaces(None, 10).await.unwrap();
        assert_eq!(spaces.len(), 3);
        let forked = SpaceId::new(b"additivity-forked".to_vec()).unwrap();
        let heads = store.heads(&forked).await.unwrap();
        assert_eq!(heads.len(), 1, "the merge collapses the fork");
        let merge = store.epoch(&forked, &heads[0].id).await.unwrap().unwrap();
        assert_eq!(merge.parents.len(), 2, "the last append merges both heads");
        assert_eq!(store.cached_heads(&forked).await.unwrap(), heads);
        let page = store.events_since(&forked, None, 100).await.unwrap();
        assert!(page.events.iter().any(|e| e.event.key.is_some()));
        assert!(page.events.iter().any(|e| e.event.key.is_none()));
    }
}
