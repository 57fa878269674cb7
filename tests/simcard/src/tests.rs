use super::*;

const MIB: u64 = 1 << 20;

fn card(config: Config) -> (tempfile::TempDir, Card) {
    let dir = tempfile::tempdir().unwrap();
    let card = Card::open(&dir.path().join("card"), Some(config)).unwrap();
    (dir, card)
}

fn small() -> Config {
    Config { capacity: 10 * MIB, devices: 2, context_cost: MIB }
}

/// A process that ran and is gone (its pid and start time, read while it
/// ran).
fn gone() -> Process {
    let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let p = Process { pid: child.id(), start: process::start_time(child.id()).unwrap() };
    child.kill().unwrap();
    child.wait().unwrap();
    p
}

#[test]
fn charges_fit_the_capacity_per_device_and_are_counted_per_process() {
    let (_d, card) = card(small());
    let me = Process::current();
    let slot = card.lock().unwrap().claim(me).unwrap();
    assert!(card.charge(slot, 0, MIB, Use::Context));
    assert!(card.charge(slot, 0, 8 * MIB, Use::Memory));
    assert!(!card.charge(slot, 0, 2 * MIB, Use::Memory), "9 MiB held of 10");
    assert!(card.charge(slot, 1, 10 * MIB, Use::Memory), "the other device is empty");
    assert!(!card.charge(slot, 2, 1, Use::Memory), "no device 2");
    assert_eq!((card.used(0), card.lock().unwrap().held(me.pid, 0)), (9 * MIB, (8 * MIB, MIB)));
    assert_eq!(card.lock().unwrap().processes(0), [(me.pid, 9 * MIB)]);
    card.uncharge(slot, 0, 8 * MIB, Use::Memory);
    assert_eq!((card.used(0), card.lock().unwrap().held(me.pid, 0)), (MIB, (0, MIB)));
}

#[test]
fn what_an_exited_process_held_comes_back() {
    let (_d, card) = card(small());
    let dead = card.lock().unwrap().claim(gone()).unwrap();
    assert!(card.charge(dead, 0, 6 * MIB, Use::Memory));
    let me = Process::current();
    let slot = card.lock().unwrap().claim(me).unwrap();
    assert!(card.charge(slot, 0, 8 * MIB, Use::Memory), "the exited process's 6 MiB were given back");
    assert_eq!(card.lock().unwrap().processes(0), [(me.pid, 8 * MIB)]);
}

#[test]
fn every_process_sees_one_card_and_the_first_decides_what_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("card");
    let a = Card::open(&path, Some(small())).unwrap();
    let slot = a.lock().unwrap().claim(Process::current()).unwrap();
    assert!(a.charge(slot, 0, 4 * MIB, Use::Memory));
    // Another opener asking for another card while a running process
    // has a slot gets this one, and sees what is held.
    let b = Card::open(&path, Some(DEFAULT)).unwrap();
    assert_eq!((b.config(), b.used(0)), (small(), 4 * MIB));
    // A reader (NVML) takes the card as it is.
    assert_eq!(Card::open(&path, None).unwrap().config(), small());
    // Once no running process has a slot, the next opener makes it anew
    // as it asks (a card whose only slot is an exited process's).
    drop(a);
    let fresh = tempfile::tempdir().unwrap();
    let other = fresh.path().join("card");
    let c = Card::open(&other, Some(small())).unwrap();
    let dead = c.lock().unwrap().claim(gone()).unwrap();
    assert!(c.charge(dead, 0, MIB, Use::Memory));
    assert_eq!(Card::open(&other, Some(DEFAULT)).unwrap().config(), DEFAULT);
}

#[test]
fn a_file_that_is_not_a_card_is_made_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("card");
    std::fs::write(&path, b"not a card").unwrap();
    let c = Card::open(&path, Some(small())).unwrap();
    assert_eq!(c.config(), small());
}

#[test]
fn a_new_program_image_holds_nothing_of_the_old() {
    let (_d, card) = card(small());
    let me = Process::current();
    let slot = card.lock().unwrap().claim(me).unwrap();
    assert!(card.charge(slot, 0, 3 * MIB, Use::Memory));
    // exec keeps the pid and the start time; the new image forgets.
    card.lock().unwrap().forget(me);
    assert_eq!((card.used(0), card.lock().unwrap().held(me.pid, 0)), (0, (0, 0)));
}

#[test]
fn threads_of_one_process_take_the_lock_one_at_a_time() {
    let (_d, card) = card(small());
    let card = std::sync::Arc::new(card);
    let inside = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (card, inside) = (card.clone(), inside.clone());
            std::thread::spawn(move || {
                for _ in 0..200 {
                    let _l = card.lock().unwrap();
                    assert_eq!(
                        inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
                        0,
                        "two threads inside"
                    );
                    inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
